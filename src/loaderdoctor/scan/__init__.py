"""``loaderdoctor scan``: fetch every sample in isolated workers and name the bad ones."""

from __future__ import annotations

from loaderdoctor.scan.core import describe, quarantine_entries, scan_dataset
from loaderdoctor.scan.model import (
    BadSample,
    HungrySample,
    Outlier,
    Profile,
    ScanReport,
    SlowSample,
)

__all__ = [
    "BadSample",
    "HungrySample",
    "Outlier",
    "Profile",
    "ScanReport",
    "SlowSample",
    "describe",
    "quarantine_entries",
    "scan_dataset",
]
