"""``tune`` against the exhaustive grid (workers 0..16 x prefetch_factor 1..4), side by side.

Three synthetic datasets: compute-bound (about 2 ms of CPU per sample, calibrated on this
machine: the best is at the core count), I/O-latency-bound (5 ms of sleep per sample: the best is
at the most workers) and memory-bound (5 ms of sleep, and each process that loads holds 256 MiB,
under a memory budget with room for 6.5 workers by a 4-worker trial's peaks: the best is in the
middle, where the most workers that fit are; each round prints that count). The grid measures every
configuration with the same function and window as ``tune`` (``loaderdoctor.tune.measure``, under
the same budget: a trial past it is stopped and counts as 0; prefetch_factor means nothing at 0
workers, so that is one point: 65 configurations), always for the whole window.

On these shared cores the load drifts from minute to minute, so tune and the grid run in rounds,
side by side: each round runs tune and the whole grid (which goes first alternates by round),
then tune's pick and that round's grid best back to back (two pairs, alternating, 3 s windows),
so "pick/grid best" compares neighbouring measurements (the grid's own figure for its best is
the luckiest of 65 noisy ones).
The ratio is per round; the time share sums the rounds, in wall seconds and in CPU seconds (this
process and its workers: less dependent on what else runs).

    python benchmarks/tune.py [--quick] [--window 1.0] [--rounds 3] [--batch-size 32]

Target: the pick within 5% of the grid's best (ratio >= 0.95), in at most 10% of the
grid's time, on all three datasets (25%).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import statistics
import time
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

from loaderdoctor.tune import LoaderConfig, MeasureSettings, TuneReport, measure, tune_dataset

MAX_WORKERS = 16
PREFETCH = (1, 2, 3, 4)


class ComputeBound(Dataset):
    """About ``ms`` of CPU per sample: small matrix products, calibrated in the main process."""

    def __init__(self, length: int = 20000, ms: float = 2.0) -> None:
        self.length = length
        self.weights = torch.randn(64, 64) / 8
        self.steps = 50
        for _ in range(3):  # converge on the target: the first rounds include warm-up
            took = self._time(60)
            self.steps = max(1, round(self.steps * (ms / 1000) / took))

    def _time(self, samples: int) -> float:
        started = time.perf_counter()
        for index in range(samples):
            self[index]
        return (time.perf_counter() - started) / samples

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        x = torch.full((64,), float(index % 13))
        for _ in range(self.steps):
            x = torch.tanh(self.weights @ x)
        return x


class LatencyBound(Dataset):
    """``ms`` of waiting (sleep stands for a remote read) and almost no CPU per sample."""

    def __init__(self, length: int = 20000, ms: float = 5.0) -> None:
        self.length = length
        self.seconds = ms / 1000

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.seconds)
        return torch.full((64,), float(index))


class MemoryBound(LatencyBound):
    """``ms`` of waiting per sample, and ``hold`` bytes that every process loading it keeps
    (a decoder's tables, a cache) once it loaded its first sample."""

    def __init__(self, length: int = 20000, ms: float = 5.0, hold: int = 256 << 20) -> None:
        super().__init__(length, ms)
        self.hold = hold
        self.held: dict[int, bytearray] = {}

    def __getitem__(self, index: int) -> torch.Tensor:
        pid = os.getpid()
        if pid not in self.held:  # a forked worker does not write the parent's: its own
            block = bytearray(self.hold)
            block[::4096] = b"\x01" * (len(block) // 4096)
            self.held[pid] = block
        return super().__getitem__(index)


MIDDLE_WORKERS = 6.5  # room in the memory budget for MemoryBound's workers, by a 4-worker trial


def memory_budget(dataset: MemoryBound, batch_size: int) -> int:
    """Room for 6.5 workers, in the terms tune's memory model and the grid's stop both use: a
    4-worker trial's peak of this process, and its median worker's private memory.

    Half a worker of room on each side keeps 6 inside and 7 outside: a worker's own memory
    besides what it holds varies (11 to 30 MiB seen, and up to 80 MiB more where the watcher
    estimates a worker between its reads), more than that only in a few workers of a trial,
    so the median of four stands for a worker and the largest would move the budget by it.
    """
    dataset[0]  # this process's own block, before anything is measured
    trial = measure(dataset, LoaderConfig.make(4), MeasureSettings(batch_size, window_s=1.0))
    worker = int(statistics.median(trial.worker_peak_bytes))
    return trial.main_peak_bytes + int(MIDDLE_WORKERS * worker)


def compute_bound() -> ComputeBound:
    """``loaderdoctor tune benchmarks/tune.py:compute_bound --batch-size 32``"""
    return ComputeBound()


def latency_bound() -> LatencyBound:
    """``loaderdoctor tune benchmarks/tune.py:latency_bound --batch-size 32``"""
    return LatencyBound()


def cpu_pressure() -> str:
    """The kernel's CPU pressure (PSI): the share of time something runnable waited for a CPU."""
    try:
        with open("/proc/pressure/cpu") as handle:
            return handle.readline().strip()
    except OSError as error:
        return f"not readable ({error.strerror})"


def memory_bound() -> MemoryBound:
    """``loaderdoctor tune benchmarks/tune.py:memory_bound --batch-size 32 --mem-budget ...``"""
    return MemoryBound()


def grid_configs() -> list[LoaderConfig]:
    configs = [LoaderConfig.make(0)]
    for workers in range(1, MAX_WORKERS + 1):
        configs += [LoaderConfig.make(workers, prefetch) for prefetch in PREFETCH]
    return configs


class Clock:
    """Wall and CPU seconds (this process and its reaped children: the loaders' workers) of one
    stretch of work: on cores shared with other processes the wall share depends on their load,
    the CPU share much less."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = cpu_seconds()

    def stop(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, cpu_seconds() - self.cpu


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def walk_grid(
    dataset: Dataset, settings: MeasureSettings, budget: int | None
) -> tuple[dict[LoaderConfig, float], float]:
    """Every configuration's rate (0 past the budget), and seconds of trials past the budget.

    A trial past the budget is stopped only once its first batch arrived: its workers' start-up
    (all of them filling their memory) is paid first, and that is most of what it costs.
    """
    rates: dict[LoaderConfig, float] = {}
    over_budget_s = 0.0
    for config in grid_configs():
        trial = measure(dataset, config, settings, phase="grid", budget_bytes=budget)
        rates[config] = trial.samples_per_s if trial.ok else 0.0
        if trial.status == "aborted":
            over_budget_s += trial.seconds
    return rates, over_budget_s


JUDGE_WINDOW_S = 3.0  # the comparison's windows: a 1 s window of 13 workers on 2 cores swung 20%


def back_to_back(
    dataset: Dataset, pick: LoaderConfig, best: LoaderConfig, settings: MeasureSettings, first: int
) -> tuple[float, float]:
    """The pick's and the grid's best's rates, each the mean of two trials of ``JUDGE_WINDOW_S``
    taken in two pairs of alternating order (``first`` says which opens): on shared cores the
    rate drifts by 10% and more from one second to the next, and neighbours cancel most of the
    drift, while the grid's own figure for its best is the luckiest of 65 short windows (with
    13 or 16 workers on 2 cores a 1 s window read up to 20% off a long run's rate)."""
    window = max(JUDGE_WINDOW_S, settings.window_s)
    judge = dataclasses.replace(settings, window_s=window, max_window_s=4 * window)
    if pick == best:
        rate = measure(dataset, pick, judge, phase="compare").samples_per_s
        return rate, rate
    pair = [pick, best] if first == 0 else [best, pick]
    rates: dict[LoaderConfig, list[float]] = {pick: [], best: []}
    for config in [*pair, *reversed(pair)]:
        rates[config].append(measure(dataset, config, judge, phase="compare").samples_per_s)
    return statistics.fmean(rates[pick]), statistics.fmean(rates[best])


@dataclass
class Round:
    pick: LoaderConfig
    best: LoaderConfig
    grid_best_rate: float  # the grid's own (luckiest) figure for its best
    pick_rate: float  # re-measured, next to the best's
    best_rate: float
    tune_wall: float
    tune_cpu: float
    grid_wall: float
    grid_cpu: float
    over_budget_s: float
    load: float  # the 1-minute load average when the round began
    fits: int  # the most workers of a grid trial that ran within the budget
    breakdown: str = ""  # where tune's time went: its trials, the restart check, the rest

    @property
    def ratio(self) -> float:
        return self.pick_rate / self.best_rate if self.best_rate > 0 else 0.0


def one_round(
    dataset: Dataset,
    settings: MeasureSettings,
    budget: int | None,
    batch_size: int,
    number: int,
) -> Round:
    """tune and the grid in the same stretch of time, the first of them alternating by round,
    then the pick and this round's grid best back to back."""
    load = os.getloadavg()[0]
    report = None
    rates: dict[LoaderConfig, float] = {}
    over_budget_s = tune_wall = tune_cpu = grid_wall = grid_cpu = 0.0
    for part in ("tune", "grid") if number % 2 == 0 else ("grid", "tune"):
        clock = Clock()
        if part == "tune":
            report = tune_dataset(
                dataset,
                batch_size=batch_size,
                max_workers=MAX_WORKERS,
                window_s=settings.window_s,
                memory_budget=budget,
            )
            tune_wall, tune_cpu = clock.stop()
        else:
            rates, over_budget_s = walk_grid(dataset, settings, budget)
            grid_wall, grid_cpu = clock.stop()
    assert report is not None
    breakdown = time_breakdown(report)
    pick = LoaderConfig.make(
        report.recommended.num_workers, report.recommended.prefetch_factor or 2
    )
    best = max(rates, key=lambda c: rates[c])
    pick_rate, best_rate = back_to_back(dataset, pick, best, settings, number % 2)
    return Round(
        pick, best, rates[best], pick_rate, best_rate,
        tune_wall, tune_cpu, grid_wall, grid_cpu, over_budget_s, load,
        max(c.num_workers for c, rate in rates.items() if rate > 0), breakdown,
    )  # fmt: skip


def time_breakdown(report: TuneReport) -> str:
    """Where tune's wall time went: each trial (workers/prefetch, phase, seconds, start-up,
    and '*' when it ended early), the persistent-workers restart check, and the rest."""
    parts = []
    for trial in report.trials:
        config = trial.config
        label = f"{config.num_workers}" + (
            f"/{config.prefetch_factor}" if config.prefetch_factor not in (None, 2) else ""
        )
        early = "*" if trial.note and trial.note.startswith("stopped after") else ""
        status = "" if trial.ok else f" {trial.status}"
        parts.append(
            f"{label} {trial.phase[:3]} {trial.seconds:.1f}s"
            f" (start {trial.startup_s:.1f}){early}{status}"
        )
    trials = sum(t.seconds for t in report.trials)
    restart = report.startup.fresh_s + (report.startup.persistent_s or 0) if report.startup else 0
    rest = report.seconds - trials
    parts.append(f"trials {trials:.1f}s; after them {rest:.1f}s (restart epochs {restart:.1f}s)")
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="0.5 s windows, 2 rounds")
    parser.add_argument("--window", type=float, default=1.0, help="steady-state s per trial")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of tune beside the grid")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--only", choices=("compute", "latency", "memory"), help="one dataset")
    args = parser.parse_args()
    window, rounds = (0.5, 2) if args.quick else (args.window, args.rounds)
    settings = MeasureSettings(batch_size=args.batch_size, window_s=window, max_window_s=4 * window)
    datasets = {"compute": compute_bound, "latency": latency_bound, "memory": memory_bound}
    # other processes on these cores skew every figure (more workers take a larger share)
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"CPU pressure before: {cpu_pressure()}")
    table = []
    for name, factory in datasets.items():
        if args.only and name != args.only:
            continue
        dataset = factory()
        if isinstance(dataset, ComputeBound):
            per_sample = dataset._time(100) * 1000
            print(f"{name}: {per_sample:.2f} ms per sample in the main process")
        budget = (
            memory_budget(dataset, args.batch_size) if isinstance(dataset, MemoryBound) else None
        )
        if budget is not None:
            print(
                f"{name}: memory budget {budget / 2**20:.0f} MiB (room for {MIDDLE_WORKERS} "
                "workers by a 4-worker trial's peaks; each round says how many the grid fit)"
            )
        done = []
        for number in range(rounds):
            row = one_round(dataset, settings, budget, args.batch_size, number)
            done.append(row)
            print(
                f"{name} round {number + 1} (load {row.load:.1f}): tune picked {row.pick.label()} "
                f"in {row.tune_wall:.1f} s wall, {row.tune_cpu:.1f} s CPU; grid best "
                f"{row.best.label()} at {row.grid_best_rate:.0f}/s in {row.grid_wall:.1f} s wall, "
                f"{row.grid_cpu:.1f} s CPU; back to back {row.pick_rate:.0f} vs "
                f"{row.best_rate:.0f}/s: {row.ratio:.3f}"
            )
            print(f"{name} round {number + 1} tune's time: {row.breakdown}")
            if budget is not None:
                print(f"{name} round {number + 1}: the grid fit up to {row.fits} workers")
        tune_wall = sum(r.tune_wall for r in done)
        grid_wall = sum(r.grid_wall for r in done)
        cpu_share = sum(r.tune_cpu for r in done) / sum(r.grid_cpu for r in done)
        ratios = [r.ratio for r in done]
        print(f"{name}: tune share of grid time: {tune_wall / grid_wall:.1%}")
        print(f"{name}: tune share of grid CPU time: {cpu_share:.1%}")
        over_budget_s = sum(r.over_budget_s for r in done)
        if over_budget_s:
            print(
                f"{name}: grid trials past the budget took {over_budget_s:.1f} s; tune share of "
                f"the grid's other trials' time: {tune_wall / (grid_wall - over_budget_s):.1%}"
            )
        print(
            f"{name}: ratio pick/grid best: median {statistics.median(ratios):.3f} "
            f"({min(ratios):.3f}, {max(ratios):.3f})"
        )
        print(f"{name}: CPU pressure {cpu_pressure()}")
        table.append((name, done, tune_wall / grid_wall, cpu_share, ratios))
    print()
    print(
        f"{'dataset':<9} {'load':>11} {'picks':<16} {'grid bests':<16} {'ratio median (min, max)':<24}"
        f" {'wall share':>10} {'CPU share':>9}"
    )
    for name, done, wall_share, cpu_share, ratios in table:
        loads = f"{min(r.load for r in done):.0f}-{max(r.load for r in done):.0f}"
        picks = ",".join(str(r.pick.num_workers) for r in done)
        bests = ",".join(str(r.best.num_workers) for r in done)
        spread = f"{statistics.median(ratios):.3f} ({min(ratios):.3f}, {max(ratios):.3f})"
        print(
            f"{name:<9} {loads:>11} {picks:<16} {bests:<16} {spread:<24}"
            f" {wall_share:>10.1%} {cpu_share:>9.1%}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"CPU pressure after: {cpu_pressure()}")
    print(
        f"(window {window} s per trial; {rounds} rounds, each: tune and the grid, the first of "
        "them alternating, then the pick and that round's grid best back to back (two pairs, "
        f"alternating, {max(JUDGE_WINDOW_S, window)} s windows); ratio: "
        "per round; shares: summed over the rounds; picks and grid bests: workers per round)"
    )


if __name__ == "__main__":
    main()
