"""Measure one configuration with the stock ``torch.utils.data.DataLoader``: what the user will run.

Start-up (``iter()`` to the first batch) is timed apart. The steady-state rate is taken from the
first batch on, between a pipeline's worth of arrivals at each end (``Arrivals``): the workers
start together, so when the first batch arrives the others of the first round are nearly done,
and a count of all batches from the first one credits the window with work done before it began.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sized
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from loaderdoctor.system.child_cgroup import CgroupParent, ChildCgroup, child_cgroup
from loaderdoctor.torch_compat import shut_down, worker_pids
from loaderdoctor.tune.model import Decided, LoaderConfig, Trial
from loaderdoctor.tune.sampler import MemoryPeaks, TrialSampler, own_memory


class DatasetError(Exception):
    """The dataset itself fails in the main process: tuning cannot measure anything."""


@dataclass
class MeasureSettings:
    batch_size: int
    window_s: float = 1.5  # steady-state seconds per trial
    max_window_s: float = 6.0  # when rounds are slow, stop here even mid-round
    collate_fn: Callable[[list[Any]], Any] | None = None
    batch_timeout_s: float = 120.0  # DataLoader(timeout=...): a hung worker fails the trial
    sample_interval_s: float = 0.1


# A trial told what decides it (``Decided``) may end after this share of its window, once its
# rate so far is clearly on one side: the rest of the window would not change the decision.
EARLY_SHARE = 0.4


class Arrivals:
    """The window's batches and when each arrived; the rate between the mean arrival time of
    the first ``depth`` batches and that of the last ``depth``, where ``depth`` is the batches in
    flight (num_workers x prefetch_factor).

    torch keeps that many batches in flight, sending an index for each batch it hands over, so
    every batch's time in the pipeline is its arrival less that of the batch ``depth`` before
    it, and by Little's law the rate is ``depth`` over their mean: the batches between the two
    blocks over the time between the blocks' mean arrivals. Both ends are then a pipeline's
    worth of arrivals, not one: the workers start together, the first round comes in a burst,
    and a count of every batch from the first one credited the window with work done before it
    began. Compute-bound on 2 cores, 1 s windows against a long run's rate: 13 workers read
    23-28% high, 16 at prefetch_factor 4 15-26% low; this reads 1-5% off for both. 16 at
    prefetch_factor 2 still read 9% and 26% high in two runs: on 2 cores the main process
    takes 16 workers' batches in bunches, whenever it gets a CPU.
    """

    def __init__(self, depth: int) -> None:
        self.depth = max(1, depth)
        self.times: list[float] = []
        self.samples: list[int] = []

    def add(self, at: float, samples: int) -> None:
        self.times.append(at)
        self.samples.append(samples)

    def complete(self) -> bool:
        """Two pipelines' worth arrived: the blocks do not overlap."""
        return len(self.times) >= 2 * self.depth

    def rates(self) -> tuple[float, float] | None:
        """(samples/s, batches/s); None before two batches. A window cut short (an iterable
        that ended, the longest window) uses blocks of half what arrived."""
        block = min(self.depth, len(self.times) // 2)
        if block < 1:
            return None
        span = (sum(self.times[-block:]) - sum(self.times[:block])) / block
        if span <= 0:
            return None
        return sum(self.samples[block:]) / span, (len(self.times) - block) / span


class CyclingSampler:
    """Every index in order, forever: a trial's window never runs into an epoch's end, unless
    ``end_epoch`` is called: then the epoch ends at the next index (the next one starts over)."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.ending = False

    def end_epoch(self) -> None:
        self.ending = True

    def __iter__(self) -> Iterator[int]:
        self.ending = False
        while True:
            for index in range(self.length):
                if self.ending:
                    return
                yield index


def is_map_style(dataset: Any) -> bool:
    return hasattr(dataset, "__getitem__") and isinstance(dataset, Sized)


def make_loader(
    dataset: Any,
    config: LoaderConfig,
    settings: MeasureSettings,
    sampler: Any = None,
    worker_init_fn: Callable[[int], None] | None = None,
) -> Any:
    from torch.utils.data import DataLoader

    with quiet_worker_count():
        return DataLoader(
            dataset,
            batch_size=settings.batch_size,
            sampler=sampler,
            num_workers=config.num_workers,
            prefetch_factor=config.prefetch_factor,
            persistent_workers=config.persistent_workers,
            pin_memory=config.pin_memory,
            collate_fn=settings.collate_fn,
            timeout=settings.batch_timeout_s if config.num_workers else 0,
            worker_init_fn=worker_init_fn,
        )


@contextmanager
def quiet_worker_count() -> Iterator[None]:
    """Silence torch's warning past its own worker suggestion (the core count), at DataLoader()
    and at every iter(): going past it is the point when the work waits rather than computes."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        yield


def batch_nbytes(batch: Any) -> int:
    """Bytes of the tensors and arrays in a batch (nested dicts, lists and tuples)."""
    if hasattr(batch, "element_size") and hasattr(batch, "nelement"):
        return int(batch.element_size() * batch.nelement())
    if hasattr(batch, "nbytes") and isinstance(batch.nbytes, int):
        return int(batch.nbytes)
    if isinstance(batch, dict):
        return sum(batch_nbytes(value) for value in batch.values())
    if isinstance(batch, list | tuple):
        return sum(batch_nbytes(value) for value in batch)
    if isinstance(batch, bytes | bytearray | str):
        return len(batch)
    return sys.getsizeof(batch)


def batch_length(batch: Any, default: int) -> int:
    """Samples in a batch: the first dimension of its first tensor, else ``default``."""
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return int(batch.shape[0])
    if isinstance(batch, dict) and batch:
        return batch_length(next(iter(batch.values())), default)
    if isinstance(batch, list | tuple) and batch:
        first = batch[0]
        return batch_length(first, default) if hasattr(first, "shape") else len(batch)
    return default


class LoaderFailed(Exception):
    """The loader raised (the user's dataset, a worker that died): what a trial records.

    Only what ``iter(loader)`` and ``next(iterator)`` raise is wrapped in it, so that a bug in
    the measuring itself is never mistaken for (and hidden as) a failed configuration.
    """

    def __init__(self, error: Exception) -> None:
        super().__init__(_one_line(error))
        self.error = error


def _start(loader: Any) -> Any:
    try:
        with quiet_worker_count():
            return iter(loader)
    except Exception as error:  # the user's loader: whatever it raises ends this trial
        raise LoaderFailed(error) from error


def _next(iterator: Any) -> Any:
    try:
        return next(iterator)
    except StopIteration:
        raise
    except Exception as error:  # the user's loader: whatever it raises ends this trial
        raise LoaderFailed(error) from error


def measure(
    dataset: Any,
    config: LoaderConfig,
    settings: MeasureSettings,
    *,
    phase: str = "workers",
    budget_bytes: int | None = None,
    worker_guess_bytes: int = 0,
    decided: Decided | None = None,
    restart: bool = False,
    cgroup: CgroupParent | None = None,
) -> Trial:
    """Run ``config`` for one steady-state window; never raises for a worker failure.

    With ``decided``, the window ends after ``EARLY_SHARE`` of it (whole rounds of the workers)
    once the rate is past one of its bars; the trial's note says so. With ``restart`` (a
    map-style dataset and workers), the loader keeps its workers (persistent_workers=True,
    which changes nothing within an epoch): the window's epoch is ended, and the time to the
    next epoch's first batch is ``restart_s``, the start-up that persistent workers save
    ``startup_s`` for, at the cost of a drained queue and one batch instead of a loader of its
    own (``measure_restart``).

    With ``cgroup`` and a budget, the workers run in a child of it limited to the budget less
    what this process holds, and the kernel, not the watcher, stops them past it: a trial whose
    worker the kernel OOM-killed there is ``does-not-fit``, with the kernel's evidence.
    """
    if cgroup is None or budget_bytes is None or config.num_workers == 0:
        return _run_trial(dataset, config, settings, phase, budget_bytes, worker_guess_bytes,
                          decided, restart)  # fmt: skip
    with child_cgroup(cgroup, budget_bytes - own_memory()) as group:
        trial = _run_trial(dataset, config, settings, phase, budget_bytes, worker_guess_bytes,
                           decided, restart, group)  # fmt: skip
        outcome = group.outcome()
    trial.cgroup_limit_bytes, trial.cgroup_peak_bytes = outcome.limit_bytes, outcome.peak_bytes
    if outcome.oom_kills:
        trial.status, trial.samples_per_s, trial.batches_per_s = "does-not-fit", 0.0, 0.0
        trial.note = "does not fit: the kernel stopped a worker in the trial's memory cgroup ("
        trial.note += "; ".join(outcome.evidence()) + ")"
    return trial


def _run_trial(
    dataset: Any,
    config: LoaderConfig,
    settings: MeasureSettings,
    phase: str,
    budget_bytes: int | None,
    worker_guess_bytes: int,
    decided: Decided | None,
    restart: bool,
    group: ChildCgroup | None = None,
) -> Trial:
    """``measure``'s trial, its workers in ``group`` when one is given: there the watcher only
    measures (the kernel holds the limit on every page; the watcher looks now and then). The
    workers stop before the trial ends, an error's too: torch's SIGCHLD handler would take the
    removal of their cgroup, which kills what is left in it, for a failure of the trial."""
    sampler = CyclingSampler(len(dataset)) if is_map_style(dataset) else None
    restart = restart and sampler is not None and config.num_workers > 0
    kept = dataclasses.replace(config, persistent_workers=True) if restart else config
    loader = make_loader(dataset, kept, settings, sampler, group.join() if group else None)
    watched = budget_bytes if group is None else None
    watcher = TrialSampler(watched, worker_guess_bytes, settings.sample_interval_s)
    trial, iterator = Trial(config=config, phase=phase), None
    main_start, started = own_memory(), time.perf_counter()
    try:
        iterator = _start(loader)
        watcher.start(main_start, worker_pids(iterator))  # after the workers' fork, never during
        first = _next(iterator)
        first_at = time.perf_counter()
        trial.startup_s = first_at - started
        trial.batch_bytes = batch_nbytes(first)
        samples_per_batch = batch_length(first, settings.batch_size)
        del first
        _steady_window(iterator, trial, settings, watcher, first_at, samples_per_batch, decided)
        if restart and trial.ok and sampler is not None:
            try:
                trial.restart_s = _restart(loader, iterator, sampler)
            except LoaderFailed as failure:  # the window's rate stands; the restart is unknown
                trial.note = f"restart not measured: {failure}"
    except LoaderFailed as failure:
        if config.num_workers == 0:
            raise DatasetError(str(failure)) from failure.error
        trial.status, trial.note = "failed", str(failure)
    except RuntimeError as error:
        # torch reports a worker's death from its SIGCHLD handler, wherever the main thread
        # is then: outside ``_next`` too. A kill by the trial's own cgroup is its verdict.
        if group is None or group.oom_kills() == 0:
            raise
        trial.status, trial.note = "failed", _one_line(error)
    finally:
        peaks = watcher.finish()
        if iterator is not None:  # an error's traceback may hold it: stop its workers anyway
            shut_down(iterator)
        del iterator, loader
        gc.collect()  # shut the workers down now, inside this trial's time
        trial.seconds = time.perf_counter() - started
    if watcher.failure is not None and trial.ok:  # its peaks are not to be trusted
        trial.status, trial.note = "failed", watcher.failure
    _record_peaks(trial, peaks)
    return trial


def _record_peaks(trial: Trial, peaks: MemoryPeaks) -> None:
    """The watcher's memory peaks of the trial, into the trial."""
    trial.main_start_bytes = peaks.main_start_bytes
    trial.main_peak_bytes = peaks.main_peak_bytes
    trial.worker_peak_bytes = peaks.worker_peak_bytes
    trial.shm_peak_bytes = peaks.shm_peak_bytes
    trial.total_peak_bytes = peaks.total_peak_bytes


def _restart(loader: Any, iterator: Any, sampler: CyclingSampler) -> float:
    """End the epoch (its batches in flight are drained), then the seconds from ``iter()`` to
    the next epoch's first batch with the workers kept."""
    sampler.end_epoch()
    while True:
        try:
            _next(iterator)
        except StopIteration:
            break
    started = time.perf_counter()
    again = _start(loader)
    _next(again)
    return time.perf_counter() - started


def _steady_window(
    iterator: Any,
    trial: Trial,
    settings: MeasureSettings,
    watcher: TrialSampler,
    first_at: float,
    samples_per_batch: int,
    decided: Decided | None = None,
) -> None:
    """Batches after the first for ``window_s`` (and until two pipelines' worth arrived), and
    their rates (``Arrivals``); from ``EARLY_SHARE`` of the window on, only until ``decided``
    has a verdict."""
    config = trial.config
    arrivals = Arrivals(config.num_workers * (config.prefetch_factor or 1))
    arrivals.add(first_at, samples_per_batch)
    batches = samples = 0
    cpu_start = time.thread_time()
    process_cpu_start = time.process_time()  # at 0 workers: torch's intra-op threads too
    delay_start = thread_run_delay_s()
    now = first_at
    while True:
        try:
            batch = _next(iterator)
        except StopIteration:  # an iterable-style dataset ran out
            trial.note = "the dataset ended before the window did"
            break
        size = batch_length(batch, samples_per_batch)
        del batch
        now = time.perf_counter()
        batches, samples = batches + 1, samples + size
        arrivals.add(now, size)
        if watcher.over_budget.is_set():
            trial.status, trial.note = "aborted", watcher.reason
            break
        elapsed = now - first_at
        complete = arrivals.complete()
        if (elapsed >= settings.window_s and complete) or elapsed >= settings.max_window_s:
            break
        rates = arrivals.rates() if decided and complete else None
        if decided is not None and rates and elapsed >= settings.window_s * EARLY_SHARE:
            verdict = decided.verdict(rates[0])
            if verdict is not None:
                trial.note = f"stopped after {elapsed:.2f} s: {verdict}"
                break
    cpu = time.thread_time() - cpu_start
    process_cpu = time.process_time() - process_cpu_start
    delay_end = thread_run_delay_s()
    window = now - first_at
    trial.window_s, trial.batches = window, batches
    if trial.ok and batches and window > 0:
        trial.samples_per_s, trial.batches_per_s = arrivals.rates() or (
            samples / window,
            batches / window,
        )
        trial.main_cpu_per_batch_s = cpu / batches
        if trial.config.num_workers == 0:
            trial.cpu_per_sample_s = process_cpu / max(samples, 1)
            if delay_start is not None and delay_end is not None:
                trial.run_queue_per_sample_s = (delay_end - delay_start) / max(samples, 1)


def measure_restart(
    dataset: Any, config: LoaderConfig, settings: MeasureSettings
) -> tuple[float, float]:
    """Seconds to an epoch's first batch with fresh workers, and with persistent ones.

    Two short epochs of a persistent loader: the first starts the workers, the second reuses them.
    """
    from torch.utils.data import SubsetRandomSampler

    if not is_map_style(dataset) or config.num_workers == 0:
        raise ValueError("start-up is compared for map-style datasets with workers only")
    # One batch per worker: only each epoch's first batch is timed, and a longer epoch only
    # spends time (prefetch_factor + 1 rounds: 5 s of 28 on a latency-bound set).
    batches = config.num_workers
    indices = [i % len(dataset) for i in range(batches * settings.batch_size)]
    persistent = LoaderConfig.make(config.num_workers, config.prefetch_factor or 2, True)
    loader = make_loader(dataset, persistent, settings, SubsetRandomSampler(indices))
    try:
        epoch_starts: list[float] = []
        for _epoch in range(2):
            started = time.perf_counter()
            with quiet_worker_count():
                iterator = iter(loader)
            next(iterator)
            epoch_starts.append(time.perf_counter() - started)
            for _batch in iterator:
                pass
            del iterator
    finally:
        del loader
        gc.collect()
    return epoch_starts[0], epoch_starts[1]


def thread_run_delay_s() -> float | None:
    """Seconds the calling thread has waited for a CPU while runnable (Linux schedstat).

    Wall time minus CPU time is not all waiting on I/O: on cores shared with other processes a
    runnable thread also waits in the run queue, and a compute-bound sample would look I/O-bound.
    """
    try:
        with open("/proc/thread-self/schedstat") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _one_line(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    # torch wraps a worker's exception: its last line is the original one
    return f"{type(error).__name__}: {lines[-1] if lines else ''}".rstrip(": ")
