"""The exceptions a supervised DataLoader raises. All subclass RuntimeError, like torch's own."""

from __future__ import annotations

from loaderdoctor.forensics.evidence import Diagnosis


class LoaderError(RuntimeError):
    """A DataLoader failure with a verdict attached as ``.diagnosis``."""

    def __init__(self, message: str, diagnosis: Diagnosis | None = None) -> None:
        super().__init__(message)
        self.diagnosis = diagnosis


class WorkerDiedError(LoaderError):
    """A worker process died (crash, OOM kill, exit, external signal)."""


class WorkerHangError(WorkerDiedError):
    """A worker made no progress past the hang timeout and was killed."""


class WorkerStartError(LoaderError):
    """Workers could not be started (unpicklable arguments, spawn bootstrapping)."""
