"""``loaderdoctor tune``: search for the fastest DataLoader settings that fit the memory budget."""

from __future__ import annotations

from loaderdoctor.tune.bounds import BOUNDS, BoundSpec, analyze
from loaderdoctor.tune.budget import MemoryModel, default_budget
from loaderdoctor.tune.core import default_max_workers, tune_dataset
from loaderdoctor.tune.measure import DatasetError, MeasureSettings, measure
from loaderdoctor.tune.model import (
    Bound,
    Budget,
    LoaderConfig,
    Skipped,
    Soak,
    SoakEpoch,
    Startup,
    Trial,
    TuneReport,
)
from loaderdoctor.tune.search import Search, SearchResult, SearchSettings, worker_ladder
from loaderdoctor.units import parse_size

__all__ = [
    "BOUNDS",
    "Bound",
    "BoundSpec",
    "Budget",
    "DatasetError",
    "LoaderConfig",
    "MeasureSettings",
    "MemoryModel",
    "Search",
    "SearchResult",
    "SearchSettings",
    "Skipped",
    "Soak",
    "SoakEpoch",
    "Startup",
    "Trial",
    "TuneReport",
    "analyze",
    "default_budget",
    "default_max_workers",
    "measure",
    "parse_size",
    "tune_dataset",
    "worker_ladder",
]
