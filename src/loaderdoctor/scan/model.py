"""The scan's findings as data: serializable both ways so a report can be re-rendered."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from loaderdoctor.jsonshape import check_shape

SCHEMA = 2
READABLE_SCHEMAS = (1, 2)  # schema 1 lacked the memory, profile and run fields; they default


@dataclass
class BadSample:
    """An index whose fetch failed: an exception, a native crash, an OOM kill or a hang."""

    index: int
    cause: str
    file: str | None
    message: str
    evidence: list[str] = field(default_factory=list)


@dataclass
class FlakySample:
    """A sample that killed its worker once and loaded when re-tried alone: an intermittent
    crash (a race, a memory peak, a flaky read), not in the quarantine since it loads."""

    index: int
    cause: str  # the verdict on the death it caused
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
class HungrySample:
    """A sample whose loading raised the worker's peak resident memory the most."""

    index: int
    peak_bytes: int  # the worker's peak RSS while loading it, above its RSS just before
    file: str | None


@dataclass
class Profile:
    """Per-sample cost along the index axis: the maximum over each bucket of ``step`` indices.

    Bounded in size whatever the dataset's length, so that a report of a million samples still
    plots; a bucket with no loaded sample (all bad) holds ``None``.
    """

    step: int
    seconds: list[float | None]
    peak_bytes: list[int | None]


@dataclass
class ShardRun:
    """One shard of a scan spread over a Ray cluster: its samples and the node that scanned them."""

    first: int  # its lowest index
    last: int  # its highest index
    samples: int
    node: str  # the node's address (nodes of one machine share it)
    node_id: str  # Ray's id of the node, unique within the cluster
    seconds: float


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
    hungriest: list[HungrySample] = field(default_factory=list)
    profile: Profile | None = None
    timeout: float | None = None  # seconds one sample may take before it counts as a hang
    mem_limit_bytes: int | None = None  # the per-worker memory cap, if any
    mem_cap: str | None = None  # how the cap was enforced ("cgroup v1", "RLIMIT_AS"), or why not
    ranks: int = 1  # torchrun processes that shared the scan
    resumed: int = 0  # samples whose result came from a checkpoint of an interrupted scan
    # Per worker started: what its first fetch took beyond that sample's own time (imports,
    # decoders, caches). Not in ``slowest``, whose times are the samples' own.
    worker_startup: list[float] = field(default_factory=list)
    flaky: list[FlakySample] = field(default_factory=list)
    # On a Ray cluster: the shards, each with the node that scanned it (empty otherwise).
    shards: list[ShardRun] = field(default_factory=list)
    # Most samples failed the same way: the scan stopped, saying so, and wrote no quarantine file
    shared_failure: str | None = None
    schema: int = SCHEMA

    @property
    def throughput(self) -> float:
        """Samples fetched per second of wall time (the bad ones included)."""
        fetched = self.total - self.resumed
        return fetched / self.seconds if self.seconds > 0 else 0.0

    @property
    def clean(self) -> bool:
        return not self.bad

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text; ``to_dict()`` gives the dict."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> ScanReport:
        """Read back what :meth:`to_json` wrote."""
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["throughput"] = round(self.throughput, 3)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScanReport:
        """The report in ``data``; ``ValueError`` naming the first field that makes no sense."""
        if data.get("schema") not in READABLE_SCHEMAS:
            raise ValueError(f"unsupported scan report schema {data.get('schema')!r}")
        check_shape(data, cls, "report")
        profile = data.get("profile")
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
            hungriest=[HungrySample(**item) for item in data.get("hungriest", [])],
            profile=Profile(**profile) if profile else None,
            timeout=data.get("timeout"),
            mem_limit_bytes=data.get("mem_limit_bytes"),
            mem_cap=data.get("mem_cap"),
            ranks=data.get("ranks", 1),
            resumed=data.get("resumed", 0),
            worker_startup=list(data.get("worker_startup", [])),
            flaky=[FlakySample(**item) for item in data.get("flaky", [])],
            shards=[ShardRun(**item) for item in data.get("shards", [])],
            shared_failure=data.get("shared_failure"),
        )
