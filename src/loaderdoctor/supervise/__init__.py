"""The supervised DataLoader: wraps the dataset, collate_fn and worker_init_fn; watches workers."""

from __future__ import annotations

from loaderdoctor.supervise.detectors import DataError, DataWarning
from loaderdoctor.supervise.errors import (
    HealingStoppedError,
    LoaderError,
    WorkerDiedError,
    WorkerHangError,
    WorkerStartError,
)
from loaderdoctor.supervise.loader import DataLoader, Incident

__all__ = [
    "DataError",
    "DataLoader",
    "DataWarning",
    "HealingStoppedError",
    "Incident",
    "LoaderError",
    "WorkerDiedError",
    "WorkerHangError",
    "WorkerStartError",
]
