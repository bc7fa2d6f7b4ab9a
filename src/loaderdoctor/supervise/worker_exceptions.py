"""A Python exception raised in a worker, re-raised in the main process with its verdict."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loaderdoctor import torch_compat
from loaderdoctor.forensics import Diagnosis, Evidence, diagnose
from loaderdoctor.report.text import format_verdict
from loaderdoctor.supervise import collect
from loaderdoctor.supervise.errors import LoaderError
from loaderdoctor.supervise.exception_tags import read_tags, strip_tags
from loaderdoctor.supervise.samples import sample_file

if TYPE_CHECKING:
    from loaderdoctor.supervise.loader import DataLoader

ERRNO_PATTERN = re.compile(r"\[Errno (\d+)\]")


def _exception_line(traceback_text: str) -> str:
    lines = [line for line in traceback_text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def build_exception(exc_type: type[BaseException], message: str) -> BaseException:
    """Recreate the worker's exception with its original type, as torch's ExceptionWrapper does."""
    if exc_type is KeyError:
        return KeyError(torch_compat.KeyErrorMessage(message))
    if getattr(exc_type, "message", None):
        try:
            return exc_type(message=message)  # type: ignore[call-arg]
        except Exception:
            return LoaderError(message)
    try:
        return exc_type(message)
    except Exception:
        return LoaderError(message)


def attach(error: BaseException, diagnosis: Diagnosis) -> None:
    try:
        error.diagnosis = diagnosis  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # an exception type with __slots__
        pass


class WorkerExceptionMixin:
    """For SupervisedMultiProcessingIter: the verdict on an exception a worker sent back."""

    _ld_loader: DataLoader
    _ld_base_evidence: Callable[[Any, int], Evidence]

    def _ld_worker_exception(
        self, data: Any, worker_idx: int, batch: int | None, indices: Any
    ) -> BaseException:
        text = data.exc_msg
        original = strip_tags(text)
        ev = self._ld_base_evidence("exception", worker_idx)
        ev.batch = batch
        ev.exception_type = data.exc_type.__name__
        ev.exception_message = _exception_line(original)
        ev.traceback = original
        match = ERRNO_PATTERN.search(ev.exception_message)
        if match:
            ev.errno = int(match.group(1))
        collect.facts_from_tags(ev, read_tags(text))
        if ev.batch_indices is None and isinstance(indices, list):
            ev.batch_indices = list(indices)
        culprit = ev.in_flight_index
        if culprit is None and ev.odd_indices and len(ev.odd_indices) == 1:
            culprit = ev.odd_indices[0]
        ev.sample_file = sample_file(self._ld_loader.dataset, culprit)
        diagnosis = diagnose(ev)
        if diagnosis.cause == "shm-exhausted":
            collect.add_machine_evidence(ev, None)
            diagnosis = diagnose(ev)
        message = (
            f"Caught {ev.exception_type} {data.where}.\n"
            f"{format_verdict(diagnosis, include_stack=False)}\n"
            f"Original {original}"
        )
        error = build_exception(data.exc_type, message)
        attach(error, diagnosis)
        return error
