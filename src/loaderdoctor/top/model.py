"""What ``loaderdoctor top`` sees of a running job at one moment: plain data, rendered elsewhere."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

TOP_SCHEMA = 1

# What a worker is doing, from its flight-recorder stage and whether its process lives.
WORKER_STATES = ("starting", "waiting", "fetching", "collating", "dead", "respawning")


@dataclass
class WorkerView:
    worker_id: int
    pid: int | None
    state: str  # one of WORKER_STATES
    in_flight_index: int | None = None
    in_flight_key: str | None = None  # a stream item's key (and file) where the worker named it
    in_flight_file: str | None = None
    state_for_s: float = 0.0  # how long it has been in this state (the sample in flight: fetching)
    rss_bytes: int | None = None
    cpu_percent: float | None = None  # over the sampling interval; None on a single look
    batches_per_s: float | None = None
    batches_done: int = 0
    samples_started: int = 0
    # The typical time of one sample in this worker (recent median where watched for a while,
    # else its life's mean), and why it is flagged: "hung" past the hang threshold, "slow" far
    # past its typical time.
    typical_sample_s: float | None = None
    flag: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class LoaderView:
    site: str  # file:line that built it ("?" for a pool not matched to its loader yet)
    num_workers: int
    hang_after_s: float | None = None  # a worker in one stage this long is "hung" (None: off)
    workers: list[WorkerView] = field(default_factory=list)
    batches_per_s: float | None = None
    samples_per_s: float | None = None
    incidents: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "workers": [w.to_dict() for w in self.workers]}


@dataclass
class ProcessView:
    """One process of the job that built supervised loaders (a rank, under torchrun)."""

    pid: int
    rank: int | None
    node: str | None
    loaders: list[LoaderView] = field(default_factory=list)
    batches_delivered: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "loaders": [x.to_dict() for x in self.loaders]}


@dataclass
class TopSnapshot:
    report_dir: str
    run_pid: int
    command: list[str]
    up_s: float
    interval_s: float  # the rates are over this long (0: one look, no rates)
    processes: list[ProcessView] = field(default_factory=list)
    incidents: int = 0
    shm_used_bytes: int | None = None
    shm_total_bytes: int | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": TOP_SCHEMA,
            **dataclasses.asdict(self),
            "processes": [p.to_dict() for p in self.processes],
        }
