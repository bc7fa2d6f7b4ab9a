"""Workers that could not start: which part of the loader would not pickle, and what to raise."""

from __future__ import annotations

from typing import Any

from loaderdoctor.forensics import Diagnosis, Evidence, diagnose
from loaderdoctor.forensics.origin import format_traceback
from loaderdoctor.forensics.verdict_text import format_verdict
from loaderdoctor.supervise.errors import WorkerStartError, attach


def start_diagnosis(error: BaseException, loader: Any, start_method: str) -> Diagnosis:
    ev = Evidence(
        kind="start",
        start_method=start_method,
        exception_type=type(error).__name__,
        exception_message=str(error),
        traceback=format_traceback(error),
    )
    if start_method != "fork":
        ev.unpicklable_parts = unpicklable_parts(loader)
    return diagnose(ev)


def start_error(error: BaseException, diagnosis: Diagnosis) -> BaseException:
    """What the user catches: torch's own exception (AttributeError, PicklingError, ...) with the
    verdict attached; a RuntimeError becomes a ``WorkerStartError``, which is one."""
    verdict = format_verdict(diagnosis)
    if isinstance(error, RuntimeError) and not isinstance(error, WorkerStartError):
        wrapped = WorkerStartError(
            f"DataLoader workers could not start (RuntimeError: {error}).\n{verdict}", diagnosis
        )
        wrapped.__cause__ = error
        return wrapped
    attach(error, diagnosis)
    error.add_note(verdict)
    return error


def unpicklable_parts(loader: Any) -> list[str]:
    """Which of the worker's arguments cannot be pickled (what spawn/forkserver must send)."""
    from multiprocessing.reduction import ForkingPickler

    parts = []
    for name, value in (
        ("dataset", loader.dataset),
        ("collate_fn", loader.collate_fn),
        ("worker_init_fn", loader.worker_init_fn),
    ):
        if value is None:
            continue
        try:
            ForkingPickler.dumps(value)
        except Exception as error:
            parts.append(f"{name} ({type(error).__name__}: {error})")
    return parts


__all__ = ["start_diagnosis", "start_error", "unpicklable_parts"]
