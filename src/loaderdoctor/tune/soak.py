"""``--soak EPOCHS``: the chosen configuration for whole epochs, as training would run it.

A short trial cannot show memory that grows with every sample read (the copy-on-read of fork
workers over Python lists, PyTorch issue #13246) or a rate that sags as caches fill: a soak runs
real epochs (shuffled, ``persistent_workers`` as chosen) and reports both per epoch.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from loaderdoctor.torch_compat import worker_pids
from loaderdoctor.tune.measure import (
    MeasureSettings,
    batch_length,
    is_map_style,
    make_loader,
    quiet_worker_count,
)
from loaderdoctor.tune.model import LoaderConfig, Soak, SoakEpoch
from loaderdoctor.tune.sampler import TrialSampler, own_memory

Progress = Callable[[int, int, str], None]


def soak(
    dataset: Any,
    config: LoaderConfig,
    settings: MeasureSettings,
    epochs: int,
    *,
    budget_bytes: int | None = None,
    worker_guess_bytes: int = 0,
    progress: Progress | None = None,
) -> Soak:
    from torch.utils.data import RandomSampler

    sampler = RandomSampler(dataset) if is_map_style(dataset) else None
    loader = make_loader(dataset, config, settings, sampler)
    results: list[SoakEpoch] = []
    note: str | None = None
    try:
        for epoch in range(epochs):
            if progress is not None:
                progress(epoch, epochs, f"soak epoch {epoch + 1}/{epochs}")
            watcher = TrialSampler(budget_bytes, worker_guess_bytes, settings.sample_interval_s)
            result, note = _epoch(loader, epoch, settings.batch_size, watcher)
            results.append(result)
            if progress is not None:
                progress(epoch + 1, epochs, f"soak epoch {epoch + 1}/{epochs}")
            if note is not None:
                break
    finally:
        del loader
        gc.collect()
    return summarize(results, note)


def _epoch(
    loader: Any, epoch: int, batch_size: int, watcher: TrialSampler
) -> tuple[SoakEpoch, str | None]:
    """One whole epoch, sampled; a note when it stopped early (over the budget, a failure)."""
    note: str | None = None
    main_start = own_memory()
    started = time.perf_counter()
    with quiet_worker_count():
        iterator = iter(loader)
    watcher.start(main_start, worker_pids(iterator))
    first_at: float | None = None
    samples = 0
    try:
        for batch in iterator:
            if first_at is None:
                first_at = time.perf_counter()
            else:
                samples += batch_length(batch, batch_size)
            del batch
            if watcher.over_budget.is_set():
                note = f"epoch {epoch}: {watcher.reason}"
                break
    finally:
        peaks = watcher.finish()
        del iterator
    if watcher.failure is not None:
        note = f"epoch {epoch}: {watcher.failure}"
    ended = time.perf_counter()
    steady = ended - (first_at or ended)
    result = SoakEpoch(
        epoch=epoch,
        samples_per_s=samples / steady if steady > 0 else 0.0,
        startup_s=(first_at or ended) - started,
        seconds=ended - started,
        worker_peak_bytes=peaks.worker_peak_bytes,
        main_peak_bytes=peaks.main_peak_bytes,
    )
    return result, note


def summarize(epochs: list[SoakEpoch], note: str | None = None) -> Soak:
    rates = [e.samples_per_s for e in epochs]
    mean = statistics.fmean(rates) if rates else 0.0
    cv = statistics.pstdev(rates) / mean if len(rates) > 1 and mean > 0 else 0.0
    growth: list[int] = []
    main_growth = 0
    if epochs:
        first, last = epochs[0], epochs[-1]
        # workers are matched by their order of creation (pid order within an epoch)
        growth = [
            after - before for before, after in zip(first.worker_peak_bytes, last.worker_peak_bytes)
        ]
        main_growth = last.main_peak_bytes - first.main_peak_bytes
    return Soak(epochs, mean, cv, growth, main_growth, note)
