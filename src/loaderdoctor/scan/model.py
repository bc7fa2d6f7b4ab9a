"""The scan's findings as data: serializable both ways so a report can be re-rendered."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = 1


@dataclass
class BadSample:
    """An index whose fetch failed: an exception, a native crash, an OOM kill or a hang."""

    index: int
    cause: str
    file: str | None
    message: str
    evidence: list[str] = field(default_factory=list)


@dataclass
class Outlier:
    """A sample that loads but whose structure differs from the majority's (breaks collation)."""

    index: int
    structure: str
    expected: str
    file: str | None


@dataclass
class SlowSample:
    index: int
    seconds: float
    file: str | None


@dataclass
class ScanReport:
    spec: str
    total: int
    scanned: int
    bad: list[BadSample]
    outliers: list[Outlier]
    slowest: list[SlowSample]
    seconds: float
    num_workers: int
    structure: str | None = None  # the majority's structure
    schema: int = SCHEMA

    @property
    def throughput(self) -> float:
        """Samples fetched per second of wall time (the bad ones included)."""
        return self.total / self.seconds if self.seconds > 0 else 0.0

    @property
    def clean(self) -> bool:
        return not self.bad

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["throughput"] = round(self.throughput, 3)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScanReport:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"unsupported scan report schema {data.get('schema')!r}")
        return cls(
            spec=data["spec"],
            total=data["total"],
            scanned=data["scanned"],
            bad=[BadSample(**item) for item in data["bad"]],
            outliers=[Outlier(**item) for item in data["outliers"]],
            slowest=[SlowSample(**item) for item in data["slowest"]],
            seconds=data["seconds"],
            num_workers=data["num_workers"],
            structure=data.get("structure"),
        )
