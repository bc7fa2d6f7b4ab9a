"""The memory and ``/dev/shm`` budget, and the model that predicts a configuration's memory.

A configuration is never started when its prediction exceeds the budget: the kernel OOM killer
does not warn, and inside a container it takes the whole training job with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loaderdoctor.tune.model import Budget, LoaderConfig, Trial
from loaderdoctor.units import format_bytes

MiB = 1024 * 1024
# Room left for what tune cannot see: page cache charged to the cgroup, the allocator's slack,
# a batch that is larger than the ones measured.
MARGIN_FRACTION = 0.10
MARGIN_MIN_BYTES = 256 * MiB
SHM_MARGIN_FRACTION = 0.10
# A worker's private memory before any trial with workers has told us: what the main process
# grew by while it ran the dataset itself, and at least this (a fork worker's own interpreter
# state and the pages its reference counting copies).
WORKER_FLOOR_BYTES = 32 * MiB


def margin(limit: int) -> int:
    return max(MARGIN_MIN_BYTES, int(limit * MARGIN_FRACTION))


def default_budget(own_bytes: int, memory_budget: int | None = None) -> Budget:
    """The tightest of the cgroup limit and the host's memory, each minus a margin; and free shm.

    ``own_bytes``: what this process holds now (``sampler.own_memory``), which the budget has to
    include (the host's *available* memory does not count it any more).
    """
    from loaderdoctor.system.cgroup import memory_cgroup
    from loaderdoctor.system.memory import host_memory
    from loaderdoctor.system.shm import shm_usage

    shm = shm_usage()
    shm_budget = (
        int(shm.free_bytes * (1 - SHM_MARGIN_FRACTION)) if shm.free_bytes is not None else None
    )
    if memory_budget is not None:
        return Budget(memory_budget, shm_budget, f"--mem-budget {format_bytes(memory_budget)}")
    candidates: list[tuple[int, str]] = []
    cgroup = memory_cgroup()
    if cgroup.limit_bytes is not None:
        limit = cgroup.limit_bytes
        candidates.append(
            (
                limit - margin(limit),
                f"cgroup v{cgroup.version} limit {format_bytes(limit)} minus a "
                f"{format_bytes(margin(limit))} margin",
            )
        )
    host = host_memory()
    if host.available_bytes is not None:
        room = host.available_bytes + own_bytes
        candidates.append(
            (
                room - margin(room),
                f"host memory available {format_bytes(room)} minus a "
                f"{format_bytes(margin(room))} margin",
            )
        )
    elif host.total_bytes is not None:
        total = host.total_bytes
        candidates.append(
            (total - margin(total), f"host memory {format_bytes(total)} minus a margin")
        )
    if not candidates:  # nothing readable: refuse to guess high
        return Budget(4 * 1024 * MiB, shm_budget, "no memory limit readable: assumed 4 GiB")
    memory, source = min(candidates)
    return Budget(max(memory, 0), shm_budget, source)


@dataclass
class MemoryModel:
    """Predicted peak = main + per_worker x workers + batch x workers x prefetch (in flight).

    Linear in the worker count, fitted conservatively: every term is the largest seen so far,
    so a prediction errs high and a configuration near the budget is skipped rather than risked.
    """

    main_bytes: int = 0
    per_worker_bytes: int = WORKER_FLOOR_BYTES
    batch_bytes: int = 0
    worker_measured: bool = False
    sources: list[str] = field(default_factory=list)

    def update(self, trial: Trial) -> None:
        self.main_bytes = max(self.main_bytes, trial.main_peak_bytes)
        self.batch_bytes = max(self.batch_bytes, trial.batch_bytes)
        workers = trial.config.num_workers
        if workers == 0:
            if not self.worker_measured:
                # a worker will allocate what the main process allocated running the dataset
                growth = max(0, trial.main_peak_bytes - trial.main_start_bytes)
                self.per_worker_bytes = max(self.per_worker_bytes, WORKER_FLOOR_BYTES + growth)
            return
        if trial.worker_peak_bytes:
            peak = max(trial.worker_peak_bytes)
            self.per_worker_bytes = (
                peak if not self.worker_measured else max(self.per_worker_bytes, peak)
            )
            self.worker_measured = True
        # what the trial really used beyond the model's terms is charged to its workers
        in_flight = self.batch_bytes * workers * (trial.config.prefetch_factor or 1)
        unexplained = trial.total_peak_bytes - self.main_bytes - in_flight
        if unexplained > self.per_worker_bytes * workers:
            self.per_worker_bytes = unexplained // workers
            self.worker_measured = True

    def predict(self, config: LoaderConfig) -> tuple[int, int]:
        """(total bytes, /dev/shm bytes) for ``config``."""
        workers = config.num_workers
        in_flight = self.batch_bytes * workers * (config.prefetch_factor or 0)
        total = self.main_bytes + self.per_worker_bytes * workers + in_flight
        return total, in_flight


def over_budget(predicted_bytes: int, predicted_shm_bytes: int, budget: Budget) -> str | None:
    """Why a prediction does not fit the budget, or None when it fits."""
    if predicted_bytes > budget.memory_bytes:
        return (
            f"predicted {format_bytes(predicted_bytes)} > memory budget "
            f"{format_bytes(budget.memory_bytes)}"
        )
    if budget.shm_bytes is not None and predicted_shm_bytes > budget.shm_bytes:
        return (
            f"predicted /dev/shm {format_bytes(predicted_shm_bytes)} > free shm "
            f"{format_bytes(budget.shm_bytes)}"
        )
    return None
