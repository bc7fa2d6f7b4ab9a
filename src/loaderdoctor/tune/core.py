"""``tune_dataset``: budget, search, start-up, bound and soak wired into one ``TuneReport``."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from loaderdoctor.system.child_cgroup import CgroupParent, child_cgroup_parent
from loaderdoctor.tune.bounds import analyze
from loaderdoctor.tune.budget import MemoryModel, default_budget
from loaderdoctor.tune.measure import MeasureSettings, is_map_style, measure, measure_restart
from loaderdoctor.tune.model import Budget, Decided, LoaderConfig, Soak, Startup, Trial, TuneReport
from loaderdoctor.tune.sampler import own_memory
from loaderdoctor.tune.search import (
    Progress,
    Search,
    SearchResult,
    SearchSettings,
    contended,
)
from loaderdoctor.tune.soak import soak

logger = logging.getLogger(__name__)

# persistent_workers=True pays off when re-starting the workers costs this much of an epoch.
PERSISTENT_MIN_SHARE = 0.01
GRID_PREFETCH = 4  # prefetch_factor 1..4: the grid a full walk would cover
MAX_DEFAULT_WORKERS = 64


def default_max_workers(usable_cores: int) -> int:
    """Past the cores, for I/O-bound data: 16, or two per usable core on a larger machine."""
    return min(MAX_DEFAULT_WORKERS, max(16, 2 * usable_cores))


def usable_cores() -> int:
    from loaderdoctor.system.cpu import cpu_info

    return cpu_info().usable_cores or os.cpu_count() or 1


def tune_dataset(
    dataset: Any,
    *,
    batch_size: int,
    spec: str = "",
    collate_fn: Callable[[list[Any]], Any] | None = None,
    collate: str | None = None,
    max_workers: int | None = None,
    memory_budget: int | None = None,
    time_budget_s: float | None = None,
    window_s: float = 1.5,
    soak_epochs: int = 0,
    progress: Progress | None = None,
    cuda: bool | None = None,
    kernel_limit: bool = True,
) -> TuneReport:
    """Search the DataLoader settings for ``dataset``; return what was measured and chosen.
    ``kernel_limit``: trials' workers in a memory cgroup (``system.child_cgroup``) if possible."""
    import torch

    started, cores = time.monotonic(), usable_cores()
    workers_cap = max_workers if max_workers is not None else default_max_workers(cores)
    has_cuda = torch.cuda.is_available() if cuda is None else cuda
    budget = default_budget(own_memory(), memory_budget)
    window = MeasureSettings(batch_size, window_s, max(4 * window_s, window_s + 1), collate_fn)
    limits = SearchSettings(workers_cap, cores, time_budget_s=time_budget_s, cuda=has_cuda)
    limits.early_stop = True  # trials end once decided (the search's own tests run them whole)
    result, model, where = _search(dataset, window, budget, limits, progress, kernel_limit)
    conservative = None if limits.kernel_limit else conservative_note(where)
    notes = [*result.notes, *filter(None, [_contention(result.trials), conservative])]
    pick, rate = result.pick, result.pick_samples_per_s
    startup = _startup(dataset, pick, result.trials, window, rate, notes)
    recommended = result.pick
    if startup is not None and startup.recommend_persistent:
        recommended = dataclasses.replace(result.pick, persistent_workers=True)
    soak_of = functools.partial(_soak, dataset, window, soak_epochs, budget, model, progress)
    recommended, soaked, rate = _soaked(result.trials, recommended, rate, notes, soak_of)
    return TuneReport(
        spec=spec,
        batch_size=batch_size,
        dataset_length=len(dataset) if is_map_style(dataset) else None,
        usable_cores=cores,
        max_workers=workers_cap,
        cuda=has_cuda,
        budget=budget,
        trials=result.trials,
        skipped=result.skipped,
        recommended=recommended,
        recommended_samples_per_s=rate,
        bound=analyze(result.trials, result.pick, cores, result.skipped),
        startup=startup,
        seconds=time.monotonic() - started,
        grid_size=(1 + workers_cap * GRID_PREFETCH) * (2 if has_cuda else 1),
        stop_reason=result.stop_reason,
        collate=collate,
        notes=notes,
        soak=soaked,
        memory_limit=where if limits.kernel_limit else None,
        conservative=conservative,
    )


def _soaked(
    trials: list[Trial],
    config: LoaderConfig,
    rate: float,
    notes: list[str],
    soak_of: Callable[[LoaderConfig], Soak | None],
) -> tuple[LoaderConfig, Soak | None, float]:
    """The pick's soak (None when none is asked). Should the pick fail it, one more soak, of the
    fastest configuration with fewer workers that every trial passed; else the failed soak
    stands and nothing is recommended (``report.tune.format_nothing_fits`` reads its note)."""
    soaked = soak_of(config)
    if soaked is None or soaked.note is None:
        return config, soaked, rate
    fallback = _next_candidate(trials, config)
    if fallback is None:
        return config, soaked, rate
    notes.append(f"{config.label()} stopped in its soak ({soaked.note})")
    second = soak_of(fallback[0])
    if second is not None and second.note is None:
        notes[-1] += f"; {fallback[0].label()} passed it and is recommended instead"
        return fallback[0], second, fallback[1]
    if second is not None:
        notes[-1] += f"; so did {fallback[0].label()} ({second.note})"
    return config, soaked, rate


def _next_candidate(trials: list[Trial], failed: LoaderConfig) -> tuple[LoaderConfig, float] | None:
    """The fastest configuration with fewer workers than ``failed`` whose trials all passed."""
    passed: dict[LoaderConfig, list[float]] = {}
    for trial in trials:
        passed.setdefault(trial.config, []).append(trial.samples_per_s if trial.ok else -1.0)
    candidates = [
        (config, sum(rates) / len(rates))
        for config, rates in passed.items()
        if config.num_workers < failed.num_workers and min(rates) >= 0
    ]
    return max(candidates, key=lambda item: item[1], default=None)


def _soak(
    dataset: Any,
    window: MeasureSettings,
    epochs: int,
    budget: Budget,
    model: MemoryModel,
    progress: Progress | None,
    recommended: LoaderConfig,
) -> Soak | None:
    """The recommended settings run for ``epochs`` whole epochs (None when none are asked)."""
    if epochs <= 0:
        return None
    return soak(
        dataset,
        recommended,
        window,
        epochs,
        budget_bytes=budget.memory_bytes,
        worker_guess_bytes=model.per_worker_bytes,
        progress=progress,
    )


def _kernel_limit(wanted: bool) -> tuple[CgroupParent | None, str]:
    """Where trials' workers get a memory cgroup of their own, or why they do not."""
    if not wanted:
        return None, "the kernel's limit was turned off for this search"
    return child_cgroup_parent()


def conservative_note(why: str) -> str:
    """What a search without the kernel's limit gives up, and why it had none."""
    return (
        f"the pick is conservative: {why}, so no trial's workers could run under a memory "
        "limit the kernel enforces; a configuration whose predicted memory exceeds the budget "
        "was not tried (the watcher sees memory only now and then, and a trial could pass the "
        "budget between two looks), and one that fits may have been left out with it"
    )


def _search(
    dataset: Any,
    window: MeasureSettings,
    budget: Budget,
    limits: SearchSettings,
    progress: Progress | None,
    kernel_limit: bool = False,
) -> tuple[SearchResult, MemoryModel, str]:
    """Walk the grid: every trial measured against the budget, the memory model fitted as it
    goes; and where the trials' workers ran under the kernel's limit, or why they did not."""
    cgroup, where = _kernel_limit(kernel_limit)
    limits.kernel_limit = cgroup is not None

    def run_trial(
        config: LoaderConfig, phase: str, worker_guess: int, decided: Decided | None = None, /
    ) -> Trial:
        return measure(
            dataset,
            config,
            window,
            phase=phase,
            budget_bytes=budget.memory_bytes,
            worker_guess_bytes=worker_guess,
            decided=decided,
            # a second look is taken where the pick is decided, the prefetch trials run at the
            # pick's count, and a probe at the budget's edge is often the pick: the restart
            # check rides along with all three (apart, it restarted 6 workers of 256 MiB for
            # 5.2 s of a 26 s search at load 15)
            restart=phase in ("repeat", "prefetch", "refine"),
            cgroup=cgroup,
        )

    model = MemoryModel()
    result = Search(run_trial, budget, limits, model=model, progress=progress).run()
    return result, model, where


def _contention(trials: list[Trial]) -> str | None:
    """A note when the 0-worker trial spent a tenth of its time queued for a CPU."""
    zero = next((t for t in trials if t.config.num_workers == 0 and t.ok), None)
    queued = contended(zero)
    if queued is None:
        return None
    return (
        f"at 0 workers the main process waited for a CPU {queued:.0%} of the time: other "
        "processes share these cores, so more workers win a larger share of them and the "
        "figures may not hold on a quiet machine"
    )


def restarts(trials: list[Trial], pick: LoaderConfig) -> tuple[float, float] | None:
    """(fresh, persistent) epoch start-up of ``pick`` from its last trial that measured both
    (``measure(restart=True)``: the same loader, its first epoch's start and its second's), else
    from the last such trial of its worker count at another prefetch_factor (which changes how
    many indices go out at an epoch's start, not when the first batch comes), or None."""
    exact: list[tuple[float, float]] = []
    same_count: list[tuple[float, float]] = []
    for trial in trials:
        if not trial.ok or trial.restart_s is None:
            continue
        if trial.config == pick:
            exact.append((trial.startup_s, trial.restart_s))
        elif dataclasses.replace(trial.config, prefetch_factor=pick.prefetch_factor) == pick:
            same_count.append((trial.startup_s, trial.restart_s))
    found = exact or same_count
    return found[-1] if found else None


def _startup(
    dataset: Any,
    pick: LoaderConfig,
    trials: list[Trial],
    settings: MeasureSettings,
    samples_per_s: float,
    notes: list[str],
) -> Startup | None:
    """Fresh against persistent workers at an epoch's start; persistent when it saves >= 1%.

    From the pick's own trial when one measured its restart (``restarts``), else measured apart.
    """
    if pick.num_workers == 0 or not is_map_style(dataset):
        return None
    try:
        fresh, persistent = restarts(trials, pick) or measure_restart(dataset, pick, settings)
    except Exception as error:  # the dataset's or ours: logged, and said in the report's notes
        logger.warning("loaderdoctor tune: epoch start-up not measured", exc_info=True)
        notes.append(f"epoch start-up not measured: {type(error).__name__}: {error}")
        return None
    epoch = len(dataset) / samples_per_s if samples_per_s > 0 else None
    recommend, reason = startup_verdict(fresh, persistent, epoch)
    return Startup(fresh, persistent, epoch, recommend, reason)


def startup_verdict(fresh: float, persistent: float, epoch: float | None) -> tuple[bool, str]:
    """Whether to keep workers between epochs, and why: the start-up saved, against a whole
    epoch with fresh workers (its steady-state time plus their start-up), the share it is."""
    saving = fresh - persistent
    share = None if epoch is None else saving / (epoch + fresh)
    recommend = saving > 0 and (share is None or share >= PERSISTENT_MIN_SHARE)
    if epoch is None or share is None:
        reason = f"re-starting workers costs {saving:.2f} s per epoch"
    else:
        reason = (
            f"re-starting workers costs {saving:.2f} s of an epoch's {epoch + fresh:.2f} s "
            f"with fresh workers ({share:.1%})"
        )
    reason += (
        ": keep them (persistent_workers=True)"
        if recommend
        else ": not worth keeping them between epochs"
    )
    return recommend, reason
