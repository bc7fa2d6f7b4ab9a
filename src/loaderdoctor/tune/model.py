"""What ``loaderdoctor tune`` measured and recommends, as data, serializable both ways."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

SCHEMA = 1
# aborted: the watcher stopped it over the budget; does-not-fit: the kernel stopped a worker at
# the limit of the trial's memory cgroup (the budget less what the main process held)
TrialStatus = Literal["ok", "aborted", "does-not-fit", "failed"]


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True, order=True)
class LoaderConfig:
    """The DataLoader keyword arguments tune searches; ``prefetch_factor`` is None at 0 workers."""

    num_workers: int
    prefetch_factor: int | None = 2
    persistent_workers: bool = False
    pin_memory: bool = False

    @classmethod
    def make(
        cls, workers: int, prefetch: int = 2, persistent: bool = False, pin: bool = False
    ) -> LoaderConfig:
        # torch refuses prefetch_factor and persistent_workers without workers (ValueError).
        if workers == 0:
            return cls(0, None, False, pin)
        return cls(workers, prefetch, persistent, pin)

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments for ``DataLoader(...)``, without the ones left at their default."""
        values: dict[str, Any] = {"num_workers": self.num_workers}
        if self.num_workers > 0:
            values["prefetch_factor"] = self.prefetch_factor
            values["persistent_workers"] = self.persistent_workers
        values["pin_memory"] = self.pin_memory
        return values

    def label(self) -> str:
        if self.num_workers == 0:
            text = "workers=0"
        else:
            text = f"workers={self.num_workers} prefetch={self.prefetch_factor}"
            if self.persistent_workers:
                text += " persistent"
        return text + (" pin" if self.pin_memory else "")


@dataclass
class Trial:
    """One configuration run for a steady-state window."""

    config: LoaderConfig
    phase: str  # workers | refine | prefetch | pin | repeat
    status: TrialStatus = "ok"
    samples_per_s: float = 0.0
    batches_per_s: float = 0.0
    startup_s: float = 0.0  # iter() to the first batch: worker start-up plus the first fetch
    # with ``measure(restart=True)``: iter() to the first batch of a second epoch, its workers
    # kept (persistent_workers=True) and idle after the first epoch ended
    restart_s: float | None = None
    window_s: float = 0.0  # the steady-state window the rate was measured over
    batches: int = 0  # batches in that window
    seconds: float = 0.0  # the whole trial, shutdown included
    main_cpu_per_batch_s: float = 0.0  # the main thread's CPU time per batch in the window
    cpu_per_sample_s: float | None = None  # at 0 workers: the main process's CPU per sample
    run_queue_per_sample_s: float | None = None  # at 0 workers: waiting for a CPU, per sample
    batch_bytes: int = 0
    main_start_bytes: int = 0  # RSS of the main process before the trial
    main_peak_bytes: int = 0  # and its peak during the trial
    worker_peak_bytes: list[int] = field(default_factory=list)  # private memory (USS) per worker
    shm_peak_bytes: int = 0  # /dev/shm use above what it was before the trial
    total_peak_bytes: int = 0  # main RSS + worker USS + shm, at the same moment
    predicted_bytes: int | None = None
    predicted_shm_bytes: int | None = None
    note: str | None = None
    cgroup_limit_bytes: int | None = None  # the limit of the cgroup its workers ran in
    cgroup_peak_bytes: int | None = None  # and the most the kernel charged there

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def charged_peak_bytes(self) -> int:
        """The trial's peak as the budget counts it: where its workers ran in a memory cgroup,
        the main process's peak beside the kernel's own count of the workers (their batches in
        /dev/shm included), else the watcher's ``total_peak_bytes``. The watcher reads a worker
        now and then and estimates it in between: 270 to 380 MiB for workers the kernel charged
        258 MiB each, which put 8 workers that fit over the budget."""
        if self.ok and self.cgroup_peak_bytes:
            return self.main_peak_bytes + self.cgroup_peak_bytes
        return self.total_peak_bytes

    @property
    def over_budget(self) -> bool:
        """Stopped past the memory budget: by the watcher, or by the kernel at the limit."""
        return self.status in ("aborted", "does-not-fit")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trial:
        values = _known(cls, data)
        values["config"] = LoaderConfig(**data["config"])
        return cls(**values)


@dataclass(frozen=True)
class Decided:
    """The rates past which a trial's outcome is clear: below ``losing`` it cannot be picked,
    above ``winning`` it beats everything measured so far by more than the noise."""

    losing: float
    winning: float

    def verdict(self, rate: float) -> str | None:
        if rate < self.losing:
            return f"below {self.losing:.0f} samples/s, it cannot be picked"
        if rate > self.winning:
            return f"above {self.winning:.0f} samples/s, clearly faster than every earlier trial"
        return None


@dataclass
class Skipped:
    """A configuration never started: its predicted memory or shm would exceed the budget."""

    config: LoaderConfig
    reason: str
    predicted_bytes: int | None = None
    predicted_shm_bytes: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Skipped:
        values = _known(cls, data)
        values["config"] = LoaderConfig(**data["config"])
        return cls(**values)


@dataclass
class Budget:
    memory_bytes: int
    shm_bytes: int | None
    source: str  # where the memory budget comes from, for the report


@dataclass
class Bound:
    """What limits the pipeline: a catalog id (``bounds.BOUNDS``) and the evidence for it."""

    id: str
    title: str
    evidence: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)


@dataclass
class Startup:
    """Epoch start-up with fresh workers against persistent ones, and how long an epoch runs."""

    fresh_s: float
    persistent_s: float | None
    epoch_s: float | None  # one pass over the dataset at the recommended rate
    recommend_persistent: bool
    reason: str


@dataclass
class SoakEpoch:
    epoch: int
    samples_per_s: float
    startup_s: float
    seconds: float
    worker_peak_bytes: list[int] = field(default_factory=list)
    main_peak_bytes: int = 0


@dataclass
class Soak:
    epochs: list[SoakEpoch]
    mean_samples_per_s: float
    cv: float  # coefficient of variation of per-epoch throughput
    worker_growth_bytes: list[int]  # per worker: last epoch's peak minus the first's
    main_growth_bytes: int
    note: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Soak:
        values = _known(cls, data)
        values["epochs"] = [SoakEpoch(**_known(SoakEpoch, e)) for e in data["epochs"]]
        return cls(**values)


@dataclass
class TuneReport:
    spec: str
    batch_size: int
    dataset_length: int | None
    usable_cores: int
    max_workers: int
    cuda: bool
    budget: Budget
    trials: list[Trial]
    skipped: list[Skipped]
    recommended: LoaderConfig
    recommended_samples_per_s: float
    bound: Bound
    startup: Startup | None
    seconds: float
    grid_size: int  # workers 0..max x prefetch 1..4 (x pin): what a full walk would run
    stop_reason: str
    collate: str | None = None  # the --collate spec, named in the snippet
    notes: list[str] = field(default_factory=list)
    soak: Soak | None = None
    # where each trial's workers ran under a memory limit the kernel enforces (None: nowhere)
    memory_limit: str | None = None
    # why the pick may stop short of what fits (no kernel limit), also among the notes
    conservative: str | None = None
    schema: int = SCHEMA

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text; ``to_dict()`` gives the dict."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> TuneReport:
        """Read back what :meth:`to_json` wrote."""
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["dataloader_kwargs"] = {"batch_size": self.batch_size, **self.recommended.kwargs()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TuneReport:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"unsupported tune report schema {data.get('schema')!r}")
        values = _known(cls, data)
        values["budget"] = Budget(**data["budget"])
        values["trials"] = [Trial.from_dict(t) for t in data["trials"]]
        values["skipped"] = [Skipped.from_dict(s) for s in data["skipped"]]
        values["recommended"] = LoaderConfig(**data["recommended"])
        values["bound"] = Bound(**data["bound"])
        values["startup"] = Startup(**data["startup"]) if data.get("startup") else None
        values["soak"] = Soak.from_dict(data["soak"]) if data.get("soak") else None
        return cls(**values)
