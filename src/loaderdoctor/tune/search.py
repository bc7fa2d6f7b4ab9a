"""The search: a doubling ladder of worker counts that stops on a plateau, a probe around the
best, prefetch_factor at the best count, and a second measurement of the best (and the pick).

The exhaustive grid (workers 0..16 x prefetch 1..4) is 65 trials; this walks 7 to 11 of them, and
with ``early_stop`` ends each (but the second measurements) once its rate decides it.
Throughput over worker counts rises, flattens where the bound is reached (the cores for compute,
the main process or the transfer for cheap samples) and stays flat or sinks, so two doublings
past the core count that each gain less than ``tolerance`` mark the plateau; for samples that keep
a CPU busy, the count that fills the cores (``saturating_workers``) ends it sooner. Every
configuration's memory is predicted first and one over the budget is never started. Trials the
measurements already rule out are not run: a deeper queue for workers that never wait
(``Search._workers_busy``), counts past the saturated cores.

On shared cores (the 0-worker trial queued for a CPU, ``contended``) single trials are too noisy
to rank: the pick is read off a throughput model fitted to every measured count at once
(``throughput.fit``), and the closest other count is measured back to back with it (the duel).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from loaderdoctor.tune.budget import MemoryModel, over_budget
from loaderdoctor.tune.model import Budget, Decided, LoaderConfig, Skipped, Trial
from loaderdoctor.tune.throughput import Throughput, fit


class Measure(Protocol):
    """Runs one trial: (config, phase, worker guess bytes[, the bars that decide it early])."""

    def __call__(
        self, config: LoaderConfig, phase: str, worker_guess: int, decided: Decided = ..., /
    ) -> Trial: ...


Progress = Callable[[int, int, str], None]  # (trials done, trials planned, what runs now)

DEFAULT_PREFETCH = 2  # torch's default
PLATEAU_STEPS = 2  # doublings in a row without a gain that end the ladder
# Probes between measured worker counts. One: on shared cores a 4% drop between two counts is
# noise as often as a peak, and each probe is a trial at about the most workers measured, the
# dearest kind (three probes were a fifth of tune's time on a loaded 2-core machine).
MAX_REFINE = 1
# Probes at the memory budget's edge: the most workers the fitted model fits, and one more
# where its uncertainty reaches past the budget.
EDGE_PROBES = 2
KNEE_MARGIN = 0.10  # scaling this much better than proportional below the pick: a knee between
MAX_PICK_TOLERANCE = 0.05
CONTENDED_SHARE = 0.10  # of the 0-worker trial's time spent waiting for a CPU: shared cores
# Early stopping (``SearchSettings.early_stop``): a trial's rate over part of its window is off by
# up to this much on busy cores, so its bars stand this far beyond what decides it.
EARLY_MARGIN = 0.05
# A duel whose first pair lands this close to its bar (relative) is settled by a second pair in
# the other order: the second of two back-to-back trials can differ by a few percent for its
# place alone, and two pairs in alternating order cancel that. A first pair that
# would overturn the model's pick takes the second pair however far past the bar: the model
# stands on every trial, one pair on two (at load 30 one pair put 1 worker ahead of 16 on a
# compute-bound set, where back to back 16 ran 1.6 times as fast).
DUEL_BAND = 0.08
# A sample that spends at least this share of its 0-worker time on a CPU keeps a worker's core
# busy: on unshared cores the rate cannot climb past the workers that fill every core (twice
# over, for the main process's share and the gaps between a worker's samples).
CPU_BOUND_SHARE = 0.5
SATURATING_SPARE = 2
# A doubling at that count that still gains this much says the model is wrong for this dataset
# (threads, caches): the ladder goes on by its usual rule.
STILL_CLIMBING = 0.25


@dataclass
class SearchSettings:
    max_workers: int
    usable_cores: int = 1
    tolerance: float = 0.04  # a gain below this is noise: the plateau
    pick_tolerance: float = 0.03  # the fewest workers within this of the best are picked
    time_budget_s: float | None = None
    cuda: bool = False
    repeats: int = 1  # top candidates measured a second time (and the pick, when not among them)
    # End a trial after part of its window once its rate decides it (``measure.Decided``):
    # below what could be picked, or clearly above everything before. Repeats run whole.
    early_stop: bool = False
    # Each trial's workers run in a memory cgroup limited to the budget (``measure(cgroup=)``):
    # a configuration that may fit is measured, and the kernel stops one that does not.
    kernel_limit: bool = False


@dataclass
class SearchResult:
    trials: list[Trial]
    skipped: list[Skipped]
    pick: LoaderConfig
    pick_samples_per_s: float
    stop_reason: str
    notes: list[str] = field(default_factory=list)


def worker_ladder(max_workers: int) -> list[int]:
    """1, 2, 4, 8, ... up to ``max_workers``, which is on the ladder too."""
    ladder, workers = [], 1
    while workers < max_workers:
        ladder.append(workers)
        workers *= 2
    if max_workers >= 1:
        ladder.append(max_workers)
    return ladder


def contended(zero: Trial | None) -> float | None:
    """The share of the 0-worker trial's time spent waiting for a CPU, when it is at least
    ``CONTENDED_SHARE`` (other processes share the cores); else None.

    There the scheduler gives every runnable process its turn, so n workers beside b other
    processes get about n / (n + b) of the cores: throughput keeps climbing with workers past
    the core count, by a few percent a doubling that a noisy trial can hide (the
    ladder stopped at 8 workers on a 2-core machine at load 13 and picked 2).
    """
    if zero is None or zero.run_queue_per_sample_s is None or zero.samples_per_s <= 0:
        return None
    queued = zero.run_queue_per_sample_s * zero.samples_per_s
    return queued if queued >= CONTENDED_SHARE else None


def saturating_workers(zero: Trial | None, cores: int) -> tuple[int, float] | None:
    """On unshared cores: the worker count past which the rate cannot climb, and the share of a
    sample's time on a CPU at 0 workers it follows from; None for samples that mostly wait.

    A worker whose sample is ``busy`` of its time on a CPU keeps ``busy`` of a core busy, so
    ``cores / busy`` workers fill the cores; ``SATURATING_SPARE`` times that leaves room for the
    main process and the gaps between samples. The compute-bound benchmark on 2 cores peaks at
    2 to 4 workers, and the ladder's trials past them (8 and 16 workers) were half of tune's time.
    """
    if zero is None or zero.cpu_per_sample_s is None or zero.samples_per_s <= 0:
        return None
    busy = min(1.0, zero.cpu_per_sample_s * zero.samples_per_s)
    if busy < CPU_BOUND_SHARE:
        return None
    return math.ceil(SATURATING_SPARE * max(1, cores) / busy), busy


def pick_from(trials: list[Trial], settings: SearchSettings) -> tuple[LoaderConfig, float]:
    """The pick (and its rate) that ``Search`` makes from ``trials`` measured before: a
    report's recommendation, checked against the report's own measurements."""

    def unused(*_args: object) -> Trial:
        raise AssertionError("pick_from measures nothing")

    search = Search(unused, Budget(0, None, "replay"), settings)
    search.trials = list(trials)
    return search.pick()


class Search:
    def __init__(
        self,
        measure: Measure,
        budget: Budget,
        settings: SearchSettings,
        *,
        model: MemoryModel | None = None,
        clock: Callable[[], float] = time.monotonic,
        progress: Progress | None = None,
    ) -> None:
        self.measure = measure
        self.budget = budget
        self.settings = settings
        self.model = model or MemoryModel()
        self.clock = clock
        self.progress = progress
        self.trials: list[Trial] = []
        self.skipped: list[Skipped] = []
        self.notes: list[str] = []
        self.started = clock()
        self.planned = 0
        self.out_of_time = False
        # on shared cores (``contended``): the 0-worker trial's queued share; the pick is then
        # read off a throughput model fitted to every count, and a close contender settled by
        # a back-to-back duel, whose winner is ``duel``
        self.shared: float | None = None
        self.duel: LoaderConfig | None = None

    # -- one trial -------------------------------------------------------------------------
    def attempt(self, config: LoaderConfig, phase: str) -> Trial | None:
        """Measure ``config`` unless it is over the budget (recorded as skipped) or out of time."""
        if any(s.config == config for s in self.skipped):
            return None
        reason, predicted, predicted_shm = self._does_not_fit(config)
        if reason is not None:  # recorded as the reason says: what may be needed
            self.skipped.append(Skipped(config, reason, predicted, predicted_shm))
            return None
        if self.trials and self._would_overrun():
            self.out_of_time = True
            return None
        if self.progress is not None:
            self.planned = max(self.planned, len(self.trials) + 1)
            self.progress(len(self.trials), self.planned, config.label())
        decided = self._decided(config) if phase != "repeat" else None
        if decided is None:
            trial = self.measure(config, phase, self.model.per_worker_bytes)
        else:
            trial = self.measure(config, phase, self.model.per_worker_bytes, decided)
        trial.predicted_bytes, trial.predicted_shm_bytes = predicted, predicted_shm
        self.trials.append(trial)
        self.model.update(trial)
        if self.progress is not None:
            self.progress(len(self.trials), max(self.planned, len(self.trials)), config.label())
        return trial if trial.ok else None

    def _does_not_fit(self, config: LoaderConfig) -> tuple[str | None, int, int]:
        """Why ``config`` is not started (None when it is), and its predicted memory and shm.

        Watched trials (``kernel_limit`` off): a configuration predicted over the budget is
        never started (the line's central prediction): the watcher reads the workers' private
        memory only now and then, so a trial can end over the budget before it sees it; the
        budget's margin below the limit absorbs the line's error. Under the kernel's limit a
        trial that overshoots is stopped at the budget, its workers alone: a configuration is
        then left out only when even the low end of its prediction (``MemoryModel.allowance``)
        is over the budget, or it was stopped there before.
        """
        predicted, predicted_shm = self.model.predict(config)
        seen = [t for t in self.trials if t.config == config and t.ok]
        if seen:
            # a configuration run before: what it used beats the linear model's prediction
            predicted = max(t.total_peak_bytes for t in seen)
            predicted_shm = max(t.shm_peak_bytes for t in seen)
        if not self.settings.kernel_limit:
            return over_budget(predicted, predicted_shm, self.budget), predicted, predicted_shm
        if any(t.config == config and t.status == "does-not-fit" for t in self.trials):
            stopped = "did not fit the memory budget: the kernel stopped an earlier trial"
            return stopped, predicted, predicted_shm
        if seen:  # it fit under the kernel's limit, whatever the watcher's estimate said
            return over_budget(0, predicted_shm, self.budget), predicted, predicted_shm
        low = predicted - self.model.allowance(config)
        reason = over_budget(low, predicted_shm, self.budget, at_least=True)
        return reason, predicted, predicted_shm

    def _decided(self, config: LoaderConfig) -> Decided | None:
        """The bars past which ``config``'s trial is decided, from what was measured so far.

        With more workers than the pick (or another prefetch_factor at its count), a trial
        matters only if it gains ``tolerance`` over the best: the pick is the fewest workers
        within ``pick_tolerance`` of the best. With fewer, only if it comes within
        ``pick_tolerance`` of the best.
        """
        if not self.settings.early_stop:
            return None
        ranked = self._ranked()
        if not ranked:
            return None
        best = ranked[0][1]
        pick, _rate = self.pick()
        gain = 1 + self.settings.tolerance
        if (config.num_workers, config.prefetch_factor) > (
            pick.num_workers,
            pick.prefetch_factor or DEFAULT_PREFETCH,
        ):
            needed = best * gain
        else:
            needed = best * (1 - self.pick_tolerance())
        return Decided(
            losing=needed * (1 - EARLY_MARGIN), winning=best * gain * (1 + 2 * EARLY_MARGIN)
        )

    def _would_overrun(self) -> bool:
        if self.settings.time_budget_s is None:
            return False
        elapsed = self.clock() - self.started
        longest = max(t.seconds for t in self.trials)
        return elapsed + longest > self.settings.time_budget_s

    def rate(self, config: LoaderConfig) -> float | None:
        """The mean steady-state samples/s of ``config`` over its good trials; None when it has
        none, or when a trial ruled it out (``ruled_out``): never a rate to pick it by."""
        if self.ruled_out(config):
            return None
        rates = [t.samples_per_s for t in self.trials if t.config == config and t.ok]
        return statistics.fmean(rates) if rates else None

    def ruled_out(self, config: LoaderConfig) -> bool:
        """A trial of ``config``, or of a configuration that holds no more memory (as many
        workers or fewer, as deep a queue or shallower), went past the memory budget: one good
        window beside it proves only that the peak came and went unseen."""
        return any(
            trial.over_budget
            and trial.config.num_workers <= config.num_workers
            and (trial.config.prefetch_factor or 0) <= (config.prefetch_factor or 0)
            for trial in self.trials
        )

    def _plan(self, remaining: int) -> None:
        self.planned = len(self.trials) + remaining

    # -- the phases ------------------------------------------------------------------------
    def run(self) -> SearchResult:
        ladder = worker_ladder(self.settings.max_workers)
        self._plan(1 + len(ladder) + 2 + 1 + self.settings.repeats)
        stop = self._ladder(ladder)
        if not self.out_of_time:
            self._plan(2 + 1 + self.settings.repeats)
            self._refine()
        if not self.out_of_time:
            self._edge()
        if not self.out_of_time:
            self._plan(2 + self.settings.repeats + int(self.settings.cuda))
            self._prefetch()
        if not self.out_of_time and self.settings.cuda:
            self._pin()
        if not self.out_of_time:
            self._plan(self.settings.repeats)
            if self.shared is not None and self._modelled() is not None:
                self._duel()
            else:
                self._repeat()
        if self.out_of_time:
            stop += "; the time budget ended the search"
        pick, rate = self.pick()
        noise = self.noise()
        if noise is not None:
            self.notes.append(
                f"repeated configurations varied by {noise:.1%} (stdev/mean); the pick is the "
                f"fewest workers within {self.pick_tolerance():.1%} of the fastest"
            )
        return SearchResult(self.trials, self.skipped, pick, rate, stop, self.notes)

    def _ladder(self, ladder: list[int]) -> str:
        zero = self.attempt(LoaderConfig.make(0), "workers")
        best = zero.samples_per_s if zero else 0.0
        # on shared cores the rate climbs past the core count (``contended``, which the
        # report's notes say): no plateau there, the ladder goes on to --max-workers
        shared = self.shared = contended(zero)
        saturating = (
            None if shared is not None else saturating_workers(zero, self.settings.usable_cores)
        )
        misses = 0
        for workers in ladder:
            trial = self.attempt(LoaderConfig.make(workers, DEFAULT_PREFETCH), "workers")
            if trial is None:
                if self.out_of_time:
                    return f"stopped at {workers} workers"
                if self.skipped and self.skipped[-1].config.num_workers == workers:
                    return f"{workers} workers would exceed the budget"
                last = self.trials[-1]
                if last.status == "does-not-fit":
                    return f"{workers} workers do not fit: the kernel stopped them at the budget"
                if last.status == "aborted":
                    return f"{workers} workers went over the memory budget and were stopped"
                return f"{workers} workers failed: {last.note}"
            gained = trial.samples_per_s >= best * (1 + self.settings.tolerance)
            climbing = trial.samples_per_s >= best * (1 + STILL_CLIMBING)
            best = max(best, trial.samples_per_s)
            if saturating is not None and workers >= saturating[0] and not climbing:
                cores = self.settings.usable_cores
                return (
                    f"{cores} usable core{'s' if cores != 1 else ''} saturated at {workers} "
                    f"workers: at 0 workers a sample is {saturating[1]:.0%} on a CPU, so more "
                    "workers only wait for the cores"
                )
            # Up to the core count workers run in parallel, so a step there that gains nothing
            # is noise more often than a plateau; past it, two steps in a row must gain nothing.
            misses = 0 if gained or workers <= self.settings.usable_cores else misses + 1
            if misses >= PLATEAU_STEPS and shared is None:
                return (
                    f"plateau at {workers} workers: {PLATEAU_STEPS} doublings in a row gained "
                    f"less than {self.settings.tolerance:.0%}"
                )
        return f"reached --max-workers {self.settings.max_workers}"

    def _worker_rates(self) -> dict[int, float]:
        rates: dict[int, float] = {}
        for trial in self.trials:
            config = trial.config
            if trial.ok and config.prefetch_factor in (None, DEFAULT_PREFETCH):
                if not config.persistent_workers and not config.pin_memory:
                    rate = self.rate(config)
                    if rate is not None:
                        rates[config.num_workers] = rate
        return rates

    def _refine(self) -> None:
        """Probe between measured worker counts where the knee or the peak can hide.

        Below the pick (the fewest workers on the plateau) when throughput rose less than in
        proportion from the next lower count: the knee lies in between (with proportional
        scaling, as for I/O latency, it does not). Above the fastest count when the next higher
        one is slower, or was over the budget: the peak may lie in between.
        """
        tried: set[int] = set()
        probes = 0
        while probes < MAX_REFINE:  # ends: each pass tries a worker count not tried before
            rates = self._worker_rates()
            if not rates:
                return
            top = max(sorted(rates), key=lambda w: rates[w])
            near = self.settings.pick_tolerance
            pick = min(w for w in rates if rates[w] >= rates[top] * (1 - near))
            candidates = []
            below = [w for w in rates if w < pick]
            if below and pick > 0:
                lower = max(below)
                proportional = lower / pick + KNEE_MARGIN
                if pick - lower > 1 and rates[lower] / rates[pick] > proportional:
                    candidates.append((lower + pick) // 2)
            above = [w for w in rates if w > top]
            if above:
                higher = min(above)
                dropped = rates[higher] < rates[top] * (1 - self.settings.tolerance)
                if higher - top > 1 and dropped:
                    candidates.append((top + higher) // 2)
            over = [w for w in self._over_budget() if w > top]
            if not above and over and min(over) - top > 1:
                # the ladder ran into the budget while still rising: what fits in between?
                candidates.append((top + min(over)) // 2)
            blocked = {s.config.num_workers for s in self.skipped}
            candidates = [w for w in candidates if w not in tried and w not in blocked]
            if not candidates:
                return
            tried.add(candidates[0])
            measured = len(self.trials)
            self.attempt(LoaderConfig.make(candidates[0], DEFAULT_PREFETCH), "refine")
            if self.out_of_time:
                return
            # a probe over the budget was never started: it costs nothing, the next may fit
            probes += len(self.trials) - measured

    def _over_budget(self) -> list[int]:
        """Worker counts predicted over the memory budget, or stopped there."""
        stopped = [t.config.num_workers for t in self.trials if t.over_budget]
        return [s.config.num_workers for s in self.skipped] + stopped

    def _edge(self) -> None:
        """Where the budget stopped the workers while throughput still rose: the most workers
        the fitted memory model says fit, then one more while its prediction is uncertain.

        Throughput there is often in proportion to the workers (I/O latency), so one worker
        short of the edge costs a sixth at six workers: the edge is measured, not guessed.
        """
        tried: set[int] = set()
        for _probe in range(EDGE_PROBES):
            rates = self._worker_rates()
            if not rates:
                return
            top = max(sorted(rates), key=lambda w: rates[w])
            over = [w for w in self._over_budget() if w > top]
            if not over or any(w > top for w in rates):
                return  # a slower count above the best: the budget is not what stopped it
            ceiling = min(over)
            may = self.settings.kernel_limit
            fits = self.model.most_workers(self.budget, ceiling, may_fit=may)
            if fits is None or fits <= top:
                fits = top + 1  # measured only while the model cannot rule it out
                total, shm = self.model.predict(LoaderConfig.make(fits))
                slack = self.model.allowance if may else self.model.uncertainty
                low = total - slack(LoaderConfig.make(fits))
                if fits >= ceiling or over_budget(low, shm, self.budget) is not None:
                    return
            if fits in tried:
                return
            tried.add(fits)
            self.attempt(LoaderConfig.make(fits, DEFAULT_PREFETCH), "refine")
            if self.out_of_time:
                return

    def _prefetch(self) -> None:
        base, base_rate = self.pick()
        if base.num_workers == 0:
            return
        noise = self._single_trial_noise()
        if noise is not None:
            self.notes.append(
                f"prefetch_factor kept at torch's default: on these shared cores single trials "
                f"vary by {noise:.0%} about the fitted curve, more than the "
                f"{self.settings.tolerance:.0%} gain a deeper queue would have to show in one"
            )
            return
        busy = self._workers_busy(base, base_rate)
        if busy is not None:
            self.notes.append(
                f"prefetch_factor kept at torch's default: {base.num_workers} workers deliver "
                f"{busy:.0%} of {base.num_workers} times the best rate one worker was measured "
                "at, so every worker is busy all the time and a deeper queue cannot gain what "
                "it would take to be picked"
            )
            return
        workers = base.num_workers
        # Deeper only: a shallower queue is not faster, and ``pick`` takes another
        # prefetch_factor only when it beats torch's default by twice the tolerance, so a trial
        # of prefetch_factor=1 (once run when the pick neared the memory budget) changed no pick
        # and cost 2.5 s of 13 on a memory-bound set.
        more = self.attempt(LoaderConfig.make(workers, 4), "prefetch")
        if more is not None and more.samples_per_s > base_rate * (1 + self.settings.tolerance):
            self.attempt(LoaderConfig.make(workers, 3), "prefetch")

    def _workers_busy(self, base: LoaderConfig, base_rate: float) -> float | None:
        """``base``'s rate as a share of its workers' capacity, when a deeper queue could not
        raise it enough to be picked; else None.

        A worker's capacity is the best rate per worker measured at any count: a worker kept
        fed delivers at least that. A deeper queue only feeds workers that wait for an index,
        so it gains at most the share missing; ``pick`` takes another prefetch_factor only
        past twice ``pick_tolerance``. The latency- and memory-bound benchmarks deliver 96-99%
        there, and their prefetch trial at 8 or 16 workers was a quarter of tune's time.
        """
        rates = self._worker_rates()
        per_worker = max((rate / w for w, rate in rates.items() if w >= 1), default=0.0)
        if per_worker <= 0 or base_rate <= 0:
            return None
        busy = base_rate / (base.num_workers * per_worker)
        return busy if busy >= 1 - 2 * self.pick_tolerance() else None

    def _single_trial_noise(self) -> float | None:
        """On shared cores, the fitted curve's residual spread when it is larger than
        ``tolerance``: one trial cannot show a gain that small there (the prefetch trials are
        at the pick's count, the dearest to start: a seventh of tune's time at load 15)."""
        if self._modelled() is None:
            return None
        curve = self.throughput()
        if curve is None or curve.spread <= self.settings.tolerance:
            return None
        return curve.spread

    def _pin(self) -> None:
        base, _rate = self.pick()
        pinned = LoaderConfig(base.num_workers, base.prefetch_factor, base.persistent_workers, True)
        self.attempt(pinned, "pin")

    def _repeat(self) -> None:
        ranked = self._ranked()
        if not ranked:
            return
        pick, _rate = self.pick()
        top = ranked[0][0]
        # Only contenders: a configuration far below the best is not picked on a second look,
        # and a best that far ahead of every other stays the pick (at 16 workers, a second look
        # at a latency-bound set's clear winner was a tenth of tune's time).
        near = ranked[0][1] * (1 - 2 * MAX_PICK_TOLERANCE)
        contenders = [config for config, rate in ranked[1:] if rate >= near]
        torchs = pick.prefetch_factor in (None, DEFAULT_PREFETCH)
        if torchs and all(c.num_workers == pick.num_workers for c in [top, *contenders]):
            # Near the best only the pick's own count at another prefetch_factor, which ``pick``
            # takes over torch's default only past twice the tolerance: a second look changes
            # nothing (2.3 s of 11 s at 16 workers on a latency-bound set, 6 s of 19 at 6 on a
            # memory-bound one).
            return
        chosen = [top, *contenders[: self.settings.repeats - 1]]
        if pick not in chosen:
            chosen.append(pick)
        if pick.prefetch_factor not in (None, DEFAULT_PREFETCH):
            # a prefetch_factor other than torch's default is advised only when it stays ahead
            default = dataclasses.replace(pick, prefetch_factor=DEFAULT_PREFETCH)
            if default not in chosen and self.rate(default) is not None:
                chosen.append(default)
        for config in chosen:
            self.attempt(config, "repeat")
            if self.out_of_time:
                return

    # -- shared cores: the model's pick and the duel ---------------------------------------
    def throughput(self) -> Throughput | None:
        """The throughput model fitted to every trial at torch's default prefetch_factor."""
        points = [
            (t.config.num_workers, t.samples_per_s)
            for t in self.trials
            if t.ok and t.config.prefetch_factor == DEFAULT_PREFETCH and plain(t.config)
        ]
        return fit(points, self.settings.usable_cores, self.shared)

    def _modelled(self) -> tuple[LoaderConfig, float] | None:
        """On shared cores, with three or more worker counts measured: the fewest measured
        workers whose modelled rate is within ``pick_tolerance`` of the fastest modelled one
        (single trials are too noisy to rank there), at torch's default prefetch_factor unless
        another is clearly faster at that count. The duel's winner, once it ran."""
        if self.shared is None:
            return None
        if self.duel is not None and not self.ruled_out(self.duel):
            return self.duel, self.rate(self.duel) or 0.0
        curve = self.throughput()
        counts = sorted(w for w in self._worker_rates() if w >= 1)
        if curve is None or len(counts) < 3:
            return None
        top = max(curve.predict(w) for w in counts)
        workers = min(w for w in counts if curve.predict(w) >= top * (1 - self.pick_tolerance()))
        config = LoaderConfig.make(workers, DEFAULT_PREFETCH)
        rate = self.rate(config) or 0.0
        for other, other_rate in self._ranked():  # fastest first
            if other.num_workers == workers and other != config and plain(other):
                if other_rate > rate * (1 + 2 * self.pick_tolerance()):
                    return other, other_rate
        if self.settings.cuda:
            pinned = dataclasses.replace(config, pin_memory=True)
            pinned_rate = self.rate(pinned)
            if pinned_rate is not None and pinned_rate >= rate * (1 - self.pick_tolerance()):
                return pinned, pinned_rate
        return config, rate

    def contender(self) -> LoaderConfig | None:
        """The fastest other worker count measured (at torch's default prefetch_factor), when
        its mean rate is within the model's noise (its residual spread, at least ``tolerance``)
        of the pick's or above: the one a second look could make the pick."""
        modelled = self._modelled()
        curve = self.throughput()
        if modelled is None or curve is None:
            return None
        pick, rate = modelled
        noise = max(curve.spread, self.settings.tolerance)
        for config, other_rate in self._ranked():
            other_count = config.num_workers != pick.num_workers
            if other_count and config.prefetch_factor == DEFAULT_PREFETCH and plain(config):
                return config if other_rate >= rate * (1 - noise) else None
        return None

    def _duel(self) -> None:
        """The contender and the model's pick measured back to back, whole windows: load drifts
        by 10% and more from one second to the next on shared cores, and a ratio of neighbours
        cancels most of that. The contender wins with more workers when it is ``tolerance``
        faster, with fewer when it is within ``pick_tolerance``."""
        modelled = self._modelled()
        challenger = self.contender()
        if modelled is None or challenger is None:
            return
        pick = modelled[0]
        fewer = (challenger.num_workers, challenger.prefetch_factor or 0) < (
            pick.num_workers,
            pick.prefetch_factor or 0,
        )
        needed = 1 - self.pick_tolerance() if fewer else 1 + self.settings.tolerance
        ratios: list[float] = []
        for order in ((challenger, pick), (pick, challenger)):
            if ratios and ratios[0] / needed <= 1 - DUEL_BAND:
                break  # the first pair keeps the pick, clear of the bar: its place cannot turn it
            rates = self._pair(*order)
            if rates is None:
                break
            ratios.append(rates[challenger] / rates[pick])
        if not ratios:
            return
        ratio = math.prod(ratios) ** (1 / len(ratios))
        self.duel = challenger if ratio >= needed else pick
        pairs = "back to back" if len(ratios) == 1 else "in two pairs, alternating"
        self.notes.append(
            f"shared cores: {challenger.label()} against {pick.label()} {pairs}: "
            f"{ratio:.3f} of its rate; {self.duel.label()} kept"
        )

    def _pair(self, first: LoaderConfig, second: LoaderConfig) -> dict[LoaderConfig, float] | None:
        """Both measured back to back (whole windows), in this order; None when one failed."""
        one = self.attempt(first, "repeat")
        two = self.attempt(second, "repeat") if one is not None else None
        if one is None or two is None or one.samples_per_s <= 0 or two.samples_per_s <= 0:
            return None
        return {first: one.samples_per_s, second: two.samples_per_s}

    def _ranked(self) -> list[tuple[LoaderConfig, float]]:
        configs = {t.config for t in self.trials if t.ok and not self.ruled_out(t.config)}
        scored = [(config, self.rate(config) or 0.0) for config in configs]
        return sorted(scored, key=lambda item: (-item[1], item[0].num_workers))

    def noise(self) -> float | None:
        """The median relative spread (stdev / mean) of configurations measured more than once."""
        spreads = []
        for config in {t.config for t in self.trials}:
            rates = [t.samples_per_s for t in self.trials if t.config == config and t.ok]
            if len(rates) > 1 and statistics.fmean(rates) > 0:
                spreads.append(statistics.pstdev(rates) / statistics.fmean(rates))
        return statistics.median(spreads) if spreads else None

    def pick_tolerance(self) -> float:
        """``pick_tolerance``, widened to the measured noise (up to ``MAX_PICK_TOLERANCE``): on
        shared cores two runs of one configuration differ by more than 3%, and a pick made on
        such a difference would add workers (and memory) for nothing."""
        noise = self.noise() or 0.0
        return min(max(self.settings.pick_tolerance, noise), MAX_PICK_TOLERANCE)

    def pick(self) -> tuple[LoaderConfig, float]:
        """The fewest workers within ``pick_tolerance`` of the best mean rate measured, at torch's
        default prefetch_factor unless another is clearly faster. On shared cores, from the
        throughput model (``_modelled``)."""
        modelled = self._modelled()
        if modelled is not None:
            return modelled
        ranked = self._ranked()
        if not ranked:
            return LoaderConfig.make(0), 0.0
        best = ranked[0][1]
        near = [item for item in ranked if item[1] >= best * (1 - self.pick_tolerance())]

        def preference(item: tuple[LoaderConfig, float]) -> tuple[int, int, bool, float]:
            config, rate = item
            prefetch = abs((config.prefetch_factor or DEFAULT_PREFETCH) - DEFAULT_PREFETCH)
            # pinned memory speeds the copy to the GPU, which tune does not time: prefer it
            return (config.num_workers, prefetch, not config.pin_memory, -rate)

        config, rate = min(near, key=preference)
        if config.prefetch_factor not in (None, DEFAULT_PREFETCH):
            # Two means of noisy rates differ by up to twice the noise by chance: torch's default
            # stays unless another prefetch_factor beat it by more (and costs no extra memory).
            default = dataclasses.replace(config, prefetch_factor=DEFAULT_PREFETCH)
            default_rate = self.rate(default)
            if default_rate is not None and default_rate >= rate * (1 - 2 * self.pick_tolerance()):
                return default, default_rate
        return config, rate


def plain(config: LoaderConfig) -> bool:
    """Neither persistent workers nor pinned memory: a point of the worker/prefetch grid."""
    return not config.persistent_workers and not config.pin_memory
