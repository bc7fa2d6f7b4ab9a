"""The exceptions a supervised DataLoader raises of its own. All subclass RuntimeError, as torch's
do; where torch raises another type (a worker's exception, a pickling error at start) the user gets
that type with the verdict attached as ``.diagnosis`` (``attach``).
"""

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


class HealingStoppedError(LoaderError):
    """Healing stopped: many samples failed alike (or past ``max_skipped``), so the failure is not
    the samples' (cause ``shared-failure``)."""


class WorkerStartError(LoaderError):
    """Workers could not be started with a RuntimeError (other start failures keep their type)."""


def attach(error: BaseException, diagnosis: Diagnosis) -> None:
    try:
        error.diagnosis = diagnosis  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # an exception type with __slots__
        pass
