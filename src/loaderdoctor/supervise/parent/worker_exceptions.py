"""A Python exception raised in a worker, re-raised in the main process with its verdict.

The re-raised exception has the type torch would raise (the worker's own type, rebuilt as torch's
``ExceptionWrapper`` does); the verdict rides along as ``.diagnosis`` and in the message.
"""

from __future__ import annotations

import re
from typing import Any

from torch.utils.data import IterableDataset

from loaderdoctor import torch_compat
from loaderdoctor.forensics import Diagnosis, Evidence, diagnose
from loaderdoctor.forensics.origin import origin_in_text
from loaderdoctor.forensics.verdict_text import format_verdict
from loaderdoctor.supervise.errors import LoaderError, attach
from loaderdoctor.supervise.parent import collect
from loaderdoctor.supervise.samples import sample_file, sample_shard
from loaderdoctor.supervise.shared_failure import inherited_state, suspect_inherited
from loaderdoctor.supervise.worker.exception_tags import read_tags, strip_tags

ERRNO_PATTERN = re.compile(r"\[Errno (\d+)\]")


def exception_line(traceback_text: str) -> str:
    lines = [line for line in traceback_text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def build_exception(exc_type: type[BaseException], message: str) -> BaseException:
    """Recreate the worker's exception with its original type, as torch's ExceptionWrapper does."""
    if exc_type is KeyError:
        return KeyError(torch_compat.KeyErrorMessage(message))
    if getattr(exc_type, "message", None):
        try:
            return exc_type(message=message)  # type: ignore[call-arg]
        except Exception:  # the user's exception class may refuse its own message
            return LoaderError(message)
    try:
        return exc_type(message)
    except Exception:  # torch raises RuntimeError(msg) here; LoaderError is one
        return LoaderError(message)


def dataset_length(dataset: Any) -> int | None:
    """``len(dataset)`` of a map-style Dataset (what the sampler draws indices below); None for
    a stream or a ``__len__`` that raises."""
    if isinstance(dataset, IterableDataset):
        return None
    try:
        return len(dataset)
    except Exception:  # no __len__, or a broken one: the verdict stands without it
        return None


def worker_exception(
    data: Any, ev: Evidence, indices: Any, dataset: Any
) -> tuple[BaseException, Diagnosis]:
    """The exception to raise for an ``ExceptionWrapper`` a worker sent, and its verdict.

    ``ev`` is the base evidence (worker, pid, epoch, batch) the caller filled in.
    """
    text = data.exc_msg
    tags = read_tags(text)
    original = strip_tags(text)
    ev.exception_type = data.exc_type.__name__
    ev.exception_message = exception_line(original)
    ev.traceback = original
    match = ERRNO_PATTERN.search(ev.exception_message)
    if match:
        ev.errno = int(match.group(1))
    collect.facts_from_tags(ev, tags)
    if not tags:
        # Not raised by the user's dataset, collate_fn or worker_init_fn (those are tagged where
        # loaderdoctor calls them): when its innermost frame is ours, it is our own bug.
        ev.internal_origin = origin_in_text(original)
    if ev.batch_indices is None and isinstance(indices, list):
        ev.batch_indices = list(indices)
    culprit = ev.in_flight_index
    if culprit is None and ev.odd_indices and len(ev.odd_indices) == 1:
        culprit = ev.odd_indices[0]
    ev.sample_file = sample_file(dataset, culprit) or ev.sample_file
    ev.sample_shard = sample_shard(dataset, culprit)
    ev.dataset_length = dataset_length(dataset)
    ev.sharing_strategy = ev.sharing_strategy or collect.sharing_strategy()
    diagnosis = diagnose(ev)
    if diagnosis.cause == "shm-exhausted":
        collect.add_machine_evidence(ev, None)
        diagnosis = diagnose(ev)
    suspect_inherited(diagnosis, inherited_state(dataset))
    message = (
        f"Caught {ev.exception_type} {data.where}.\n"
        f"{format_verdict(diagnosis, include_stack=False)}\n"
        f"Original {original}"
    )
    error = build_exception(data.exc_type, message)
    attach(error, diagnosis)
    return error, diagnosis


__all__ = ["ERRNO_PATTERN", "build_exception", "exception_line", "worker_exception"]
