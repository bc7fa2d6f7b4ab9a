"""Workers that could not start: clean up, and say which part of the loader would not pickle."""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any

from loaderdoctor.forensics import Evidence, diagnose
from loaderdoctor.report.text import format_verdict
from loaderdoctor.supervise.errors import LoaderError, WorkerStartError

if TYPE_CHECKING:
    from loaderdoctor.supervise.loader import DataLoader


class StartFailureMixin:
    """For SupervisedMultiProcessingIter: the verdict when the worker pool fails to start."""

    _shutdown: Any
    _ld_loader: DataLoader
    _ld_start_method: str
    _ld_cleanup: Any

    def _ld_abort_start(self) -> None:
        for process in getattr(self, "_workers", []):
            if process.is_alive():
                process.kill()
            process.join(timeout=5)
        self._shutdown = True
        self._ld_cleanup()

    def _ld_start_failure(self, error: Exception) -> LoaderError:
        loader = self._ld_loader
        ev = Evidence(
            kind="start",
            start_method=self._ld_start_method,
            exception_type=type(error).__name__,
            exception_message=str(error),
            traceback="".join(traceback.format_exception(error)),
        )
        if self._ld_start_method != "fork":
            ev.unpicklable_parts = unpicklable_parts(loader)
        diagnosis = diagnose(ev)
        message = (
            f"DataLoader workers could not start ({type(error).__name__}: {error}).\n"
            + format_verdict(diagnosis)
        )
        return WorkerStartError(message, diagnosis)


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
