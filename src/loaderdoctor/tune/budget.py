"""The memory and ``/dev/shm`` budget, and the model that predicts a configuration's memory.

A configuration is never started when its prediction exceeds the budget: the kernel OOM killer
does not warn, and inside a container it takes the whole training job with it.
"""

from __future__ import annotations

import math
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
    """Predicted peak = fixed + per_worker x workers + batch x workers x prefetch (in flight).

    Until trials at two worker counts have run, every term is the largest seen so far, so a
    prediction errs high. From then on the fixed and per-worker parts are a least-squares line
    through the measured (workers, peak) points: one worker's peak varies by a third from trial
    to trial on shared cores (273 to 401 MiB for a 256 MiB dataset), and a prediction
    from the largest one skipped configurations that fit. ``spread_bytes`` says how far a
    prediction may be off (``uncertainty``); the search measures a configuration whose
    prediction fits but whose uncertainty reaches past the budget (the trial's own watcher
    stops it there) and never starts one predicted over the budget.
    """

    main_bytes: int = 0
    per_worker_bytes: int = WORKER_FLOOR_BYTES
    batch_bytes: int = 0
    worker_measured: bool = False
    sources: list[str] = field(default_factory=list)
    # the fit: (workers, peak beyond the batches in flight) of every good trial with workers
    points: list[tuple[int, int]] = field(default_factory=list)
    fixed_bytes: int | None = None  # None until two worker counts are measured
    spread_bytes: int = 0  # the residuals' standard deviation (or a worker's, with two points)

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
        in_flight = self.batch_bytes * workers * (trial.config.prefetch_factor or 1)
        if trial.ok:
            self.points.append((workers, trial.charged_peak_bytes - in_flight))
            if self._fit(trial):
                return
        elif trial.status == "does-not-fit" and self.fixed_bytes is not None:
            # stopped by the kernel mid-allocation: its peaks are a part of what it needed,
            # and its largest worker (the one killed while it grew) would move the fitted line
            # for every count (6 workers that fit were then predicted over the budget)
            return
        if trial.worker_peak_bytes:
            peak = max(trial.worker_peak_bytes)
            self.per_worker_bytes = (
                peak if not self.worker_measured else max(self.per_worker_bytes, peak)
            )
            self.worker_measured = True
        # what the trial really used beyond the model's terms is charged to its workers
        unexplained = trial.charged_peak_bytes - self.main_bytes - in_flight
        if unexplained > self.per_worker_bytes * workers:
            self.per_worker_bytes = unexplained // workers
            self.worker_measured = True

    def _fit(self, trial: Trial) -> bool:
        """Refit the line through ``points``; False while they cover only one worker count."""
        fitted = fit_line(self.points)
        if fitted is None:
            return False
        fixed, per_worker, spread = fitted
        if spread == 0 and len(self.points) == len({w for w, _ in self.points}) == 2:
            # two points fit any line exactly: how far apart the workers of a trial were
            # tells how far off a worker's share can be
            peaks = trial.worker_peak_bytes
            spread = max(peaks) - min(peaks) if peaks else 0
        self.fixed_bytes, self.spread_bytes = fixed, spread
        self.per_worker_bytes = max(per_worker, WORKER_FLOOR_BYTES)
        self.worker_measured = True
        return True

    def most_workers(self, budget: Budget, below: int, *, may_fit: bool = False) -> int | None:
        """The most workers under ``below`` predicted to fit ``budget`` (torch's default
        prefetch_factor), or None when none does; with ``may_fit``, the most whose prediction
        less its ``allowance`` fits."""
        for workers in range(below - 1, 0, -1):
            config = LoaderConfig.make(workers)
            total, shm = self.predict(config)
            if may_fit:
                total -= self.allowance(config)
            if over_budget(total, shm, budget) is None:
                return workers
        return None

    def predict(self, config: LoaderConfig) -> tuple[int, int]:
        """(total bytes, /dev/shm bytes) for ``config``."""
        workers = config.num_workers
        in_flight = self.batch_bytes * workers * (config.prefetch_factor or 0)
        fixed = self.main_bytes if self.fixed_bytes is None else self.fixed_bytes
        total = fixed + self.per_worker_bytes * workers + in_flight
        return total, in_flight

    def uncertainty(self, config: LoaderConfig) -> int:
        """Twice the standard error of ``predict(config)``'s total: the line's own error, which
        grows away from the measured worker counts, and one trial's scatter about it."""
        if self.fixed_bytes is None or not self.points or self.spread_bytes == 0:
            return 0
        counts = [w for w, _ in self.points]
        mean = sum(counts) / len(counts)
        spread = sum((w - mean) ** 2 for w in counts)
        distance = (config.num_workers - mean) ** 2 / spread if spread else 0.0
        return int(2 * self.spread_bytes * math.sqrt(1 + 1 / len(counts) + distance))

    def allowance(self, config: LoaderConfig) -> int:
        """How far below ``predict(config)`` its peak may still be: half a worker. A worker's
        own memory besides its data varies by tens of MiB from trial to trial (11 to 30 MiB on
        the memory-bound benchmark), and the watcher's estimate of a worker between two of its
        reads by up to 80 MiB more, so a line through three counts can put a count that fits
        half a worker over the budget (the pick stopped at 4 or 5 workers of the 6 that fit:
        0.75 of the best). Not the line's ``uncertainty``: with two counts measured it spans
        several workers at twice the count, and every count would be worth a trial."""
        return self.per_worker_bytes // 2 if config.num_workers > 0 else 0


def fit_line(points: list[tuple[int, int]]) -> tuple[int, int, int] | None:
    """Least squares ``peak = fixed + per_worker x workers``: (fixed, per_worker, residual
    standard deviation), or None while the points cover fewer than two worker counts."""
    if len({w for w, _ in points}) < 2:
        return None
    n = len(points)
    mean_w = sum(w for w, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((w - mean_w) ** 2 for w, _ in points)
    slope = sum((w - mean_w) * (y - mean_y) for w, y in points) / sxx
    fixed = mean_y - slope * mean_w
    residuals = [y - fixed - slope * w for w, y in points]
    spread = math.sqrt(sum(r * r for r in residuals) / (n - 2)) if n > 2 else 0.0
    return int(fixed), int(slope), int(spread)


def over_budget(
    predicted_bytes: int, predicted_shm_bytes: int, budget: Budget, *, at_least: bool = False
) -> str | None:
    """Why a prediction does not fit the budget, or None when it fits; ``at_least``: the
    prediction is the low end of what may be needed."""
    if predicted_bytes > budget.memory_bytes:
        return (
            f"predicted {'at least ' if at_least else ''}{format_bytes(predicted_bytes)} > "
            f"memory budget {format_bytes(budget.memory_bytes)}"
        )
    if budget.shm_bytes is not None and predicted_shm_bytes > budget.shm_bytes:
        return (
            f"predicted /dev/shm {format_bytes(predicted_shm_bytes)} > free shm "
            f"{format_bytes(budget.shm_bytes)}"
        )
    return None
