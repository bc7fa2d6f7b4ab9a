"""The facts of one failure that choose and order its fixes.

Each fact is a name and how to read it from the ``Evidence``: a value to quote in a fix (a limit, a
path, a type), ``True`` for a plain yes, or None when the evidence does not show it. The catalog's
rows name the facts that select each fitted fix (``catalog.FittedFix``); ``choose_fixes`` puts
the selected ones first, filled in, so the first fix a user reads is the one this failure's
evidence points at.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loaderdoctor.forensics.catalog import Cause
from loaderdoctor.forensics.error_text import error_text
from loaderdoctor.forensics.evidence import Evidence
from loaderdoctor.units import format_bytes

# The limit the fix advises: a limit below it is the one to raise before hunting for a leak.
ADVISED_OPEN_FILES_LIMIT = 65536
# Docker's default /dev/shm is 64 MiB; below this a batch or two of images fills it, so the size
# of /dev/shm, not the number of workers, is what to change first.
SMALL_SHM_BYTES = 1024**3
# The stack frames of a native library that has its own fix row.
_OPENCV_FRAME = re.compile(r"[/\\]cv2[/\\]|\bcv2\.")
_UNSENDABLE = re.compile(r"(?:cannot|can't) pickle '([\w.]+)' object", re.IGNORECASE)
_NONE_MESSAGE = re.compile(r"NoneType|\bNone\b")

FactReader = Callable[[Evidence], Any]


def _low_open_files_limit(ev: Evidence) -> int | None:
    limit = ev.open_files_limit
    return limit if limit is not None and limit < ADVISED_OPEN_FILES_LIMIT else None


def _unpicklable_where(ev: Evidence) -> str | None:
    if ev.unpicklable_path is None:
        return None
    kind = f" (a {ev.unpicklable_type})" if ev.unpicklable_type else ""
    return f"`{ev.unpicklable_path}`{kind}"


def _unpicklable_in_dataset(ev: Evidence) -> bool | None:
    path = ev.unpicklable_path or ""
    return True if path == "dataset" or path.startswith(("dataset.", "dataset[")) else None


def _unsendable_batch(ev: Evidence) -> str | None:
    """collate_fn's return value (or a part of it) that the worker could not send back."""
    if ev.stage != "send":
        return None
    kind = f" (a {ev.unpicklable_type})" if ev.unpicklable_type else ""
    if ev.unpicklable_path == "batch":
        return f"the batch collate_fn returned{kind}"
    if ev.unpicklable_path is not None:
        return f"`{ev.unpicklable_path}`{kind} in the batch collate_fn returned"
    match = _UNSENDABLE.search(ev.exception_message or "")
    return f"a {match.group(1)} in the batch collate_fn returned" if match else None


def _none_samples(ev: Evidence) -> str | None:
    """The samples that are None, when collate failed on a None (``'NoneType' object has no
    attribute 'numel'``, ``found <class 'NoneType'>``)."""
    if ev.stage != "collate" or not _NONE_MESSAGE.search(ev.exception_message or ""):
        return None
    culprits = ev.odd_indices or ([ev.in_flight_index] if ev.in_flight_index is not None else [])
    if not culprits:
        return None
    label = "sample" if len(culprits) == 1 else "samples"
    return f"{label} {', '.join(repr(i) for i in culprits)}"


def _len_past_data(ev: Evidence) -> str | None:
    """An IndexError for an index below ``__len__``: the sampler only asks for those, so
    ``__len__`` counts more items than the data holds."""
    index, length = ev.in_flight_index, ev.dataset_length
    if ev.exception_type != "IndexError" or not isinstance(index, int) or length is None:
        return None
    if not 0 <= index < length:
        return None
    text = f"`__len__` returns {length}, but `dataset[{index}]` raised IndexError"
    if ev.last_loaded_index is not None:
        text += (
            f" (the last sample this worker loaded before it: `dataset[{ev.last_loaded_index}]`)"
        )
    return text


def _exit_code_zero(ev: Evidence) -> bool | None:
    return True if ev.kind == "death" and ev.exit_code == 0 else None


def _opencv_in_stack(ev: Evidence) -> bool | None:
    return True if _OPENCV_FRAME.search(ev.python_stack or ev.traceback or "") else None


def _small_shm(ev: Evidence) -> str | None:
    total = ev.shm_total_bytes
    return format_bytes(total) if total is not None and total < SMALL_SHM_BYTES else None


def _large_shm(ev: Evidence) -> str | None:
    total = ev.shm_total_bytes
    return format_bytes(total) if total is not None and total >= SMALL_SHM_BYTES else None


def _kernel_log_unread(ev: Evidence) -> bool | None:
    return True if ev.kernel_log_readable is False else None


def _message_says(pattern: str) -> FactReader:
    compiled = re.compile(pattern)

    def reader(ev: Evidence) -> bool | None:
        text = error_text(f"{ev.exception_message or ''}\n{ev.traceback or ''}")
        return True if compiled.search(text) else None

    return reader


@dataclass(frozen=True)
class Fact:
    shows: str  # what it means that the fact holds, for the cause pages
    read: FactReader


FACTS: dict[str, Fact] = {
    "low_open_files_limit": Fact(
        f"the open-file limit of the process that ran out (below {ADVISED_OPEN_FILES_LIMIT})",
        _low_open_files_limit,
    ),
    "file_descriptor_strategy": Fact(
        "torch's sharing strategy is 'file_descriptor'",
        lambda ev: True if ev.sharing_strategy == "file_descriptor" else None,
    ),
    "unpicklable_object": Fact(
        "the path to the object pickle refuses, and its type", _unpicklable_where
    ),
    "unpicklable_in_dataset": Fact("that object lies inside the Dataset", _unpicklable_in_dataset),
    "unsendable_batch": Fact(
        "the part of a finished batch that could not be pickled back, and its type",
        _unsendable_batch,
    ),
    "none_samples": Fact("the samples that are None, when collate failed on a None", _none_samples),
    "len_past_data": Fact(
        "an IndexError for an index below `__len__`, and the index before it that loaded",
        _len_past_data,
    ),
    "exit_code_zero": Fact("the worker exited with status 0", _exit_code_zero),
    "exit_frame": Fact("the frame that called sys.exit() in the worker", lambda ev: ev.exit_frame),
    "no_python_stack": Fact(
        "no Python stack of the worker could be captured",
        lambda ev: True if ev.kind in ("death", "hang") and not ev.python_stack else None,
    ),
    "opencv_in_stack": Fact("OpenCV (cv2) in the worker's stack", _opencv_in_stack),
    "small_shm": Fact(f"/dev/shm is smaller than {format_bytes(SMALL_SHM_BYTES)}", _small_shm),
    "large_shm": Fact(f"/dev/shm is {format_bytes(SMALL_SHM_BYTES)} or more", _large_shm),
    "worker_rss": Fact(
        "the worker's memory at its last report",
        lambda ev: format_bytes(ev.worker_rss_bytes) if ev.worker_rss_bytes else None,
    ),
    "cgroup_limit": Fact(
        "the memory cgroup's limit",
        lambda ev: (
            format_bytes(ev.cgroup_limit_bytes) if ev.cgroup_limit_bytes is not None else None
        ),
    ),
    "kernel_log_unread": Fact("the kernel log could not be read", _kernel_log_unread),
    "main_script": Fact("the main script without the guard", lambda ev: ev.main_script),
    "socket_path_too_long": Fact(
        "the error says 'AF_UNIX path too long'", _message_says(r"AF_UNIX path too long")
    ),
    "thread_start_failed": Fact(
        'the error says "can\'t start new thread"', _message_says(r"can't start new thread")
    ),
    "forked_objc": Fact(
        "the Objective-C runtime's fork-safety abort", _message_says(r"when fork\(\) was called")
    ),
    "cuda_stage": Fact(
        "where CUDA was touched (the Dataset or collate_fn)",
        lambda ev: {"fetch": "Dataset", "collate": "collate_fn"}.get(ev.stage or ""),
    ),
}


def facts_of(ev: Evidence) -> dict[str, Any]:
    """Every fact the evidence shows (readers that return None are left out)."""
    found = {}
    for name, fact in FACTS.items():
        value = fact.read(ev)
        if value is not None:
            found[name] = value
    return found


def choose_fixes(cause: Cause, facts: dict[str, Any]) -> list[str]:
    """The fitted fixes the facts select, in the row's order and filled in, then the cause's own
    fixes that none of them makes moot."""
    chosen: list[str] = []
    moot: set[int] = set()
    for fitted in cause.fitted:
        if all(name in facts for name in fitted.when) and not any(
            name in facts for name in fitted.unless
        ):
            text = fitted.text.format(**facts)
            chosen.append(text[:1].upper() + text[1:])  # a fact may open the sentence
            moot.update(fitted.replaces)
    chosen.extend(fix for number, fix in enumerate(cause.fixes) if number not in moot)
    return chosen


__all__ = ["FACTS", "Fact", "choose_fixes", "facts_of"]
