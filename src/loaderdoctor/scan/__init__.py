"""``loaderdoctor scan``: fetch every sample in isolated workers and name the bad ones."""

from __future__ import annotations

from loaderdoctor.scan.core import scan_dataset
from loaderdoctor.scan.findings import quarantine_entries
from loaderdoctor.scan.model import (
    BadSample,
    HungrySample,
    Outlier,
    Profile,
    ScanReport,
    ShardRun,
    SlowSample,
)
from loaderdoctor.scan.summary import describe

__all__ = [
    "BadSample",
    "HungrySample",
    "Outlier",
    "Profile",
    "ScanReport",
    "ShardRun",
    "SlowSample",
    "describe",
    "quarantine_entries",
    "scan_dataset",
]
