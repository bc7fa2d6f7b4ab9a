"""``loaderdoctor scan``: fetch every sample in isolated workers and name the bad ones."""

from __future__ import annotations

from loaderdoctor.scan.core import describe, quarantine_entries, scan_dataset
from loaderdoctor.scan.model import BadSample, Outlier, ScanReport, SlowSample

__all__ = [
    "BadSample",
    "Outlier",
    "ScanReport",
    "SlowSample",
    "describe",
    "quarantine_entries",
    "scan_dataset",
]
