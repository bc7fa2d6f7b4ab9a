"""What a supervised loader and its iterators share, without either holding the other.

The loader holds a ``Supervision``; each iterator holds the same ``Supervision`` and a
``LoaderSnapshot`` (what torch's iterator reads from a loader), never the loader itself: an
iterator that held its loader would, with persistent workers, form a reference cycle, and its
workers would outlive a dropped loader until a cyclic garbage collection.
"""

from __future__ import annotations

import collections
import enum
import os
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from loaderdoctor import torch_compat
from loaderdoctor.forensics.evidence import Diagnosis
from loaderdoctor.supervise import containment
from loaderdoctor.supervise.batch_count import samples_delivered
from loaderdoctor.supervise.detectors import DataWatch
from loaderdoctor.supervise.heal import user_stacklevel
from loaderdoctor.supervise.heal_policy import MAX_DEATHS_IN_A_ROW, Backoff
from loaderdoctor.supervise.live_quarantine import LiveQuarantine
from loaderdoctor.supervise.parent.incidents import (
    BackoffStep,
    IncidentLog,
    LoaderReport,
    build_report,
)
from loaderdoctor.supervise.parent.ledger import Counts
from loaderdoctor.supervise.parent.quarantine import (
    QuarantineEntry,
    dataset_length,
    read_quarantine,
    write_quarantine,
)
from loaderdoctor.supervise.parent.quarantine import now as quarantine_now
from loaderdoctor.supervise.shared_failure import (
    DEFAULT_BUDGET,
    Budget,
    RaggedFields,
    SharedFailures,
    inherited_state,
    stop_diagnosis,
)
from loaderdoctor.supervise.worker import shared_handles
from loaderdoctor.supervise.worker.sample_policy import HealedBatch, SamplePolicy
from loaderdoctor.system.oom_priority import (
    PROBE_OOM_SCORE_ADJ,
    WORKER_OOM_SCORE_ADJ,
    oom_protection,
)

DEATHS_ALIKE = (
    "what the workers share, not the samples: a server or mount the dataset reads from, state "
    "inherited from the main process (a lock, a semaphore, a handle opened in __init__), the "
    "machine"
)


class IterState(enum.Enum):
    """Where a supervised multiprocessing iterator stands (replaces a handful of flags)."""

    RUNNING = "running"  # its own worker pool serves the batches
    HANDED_OVER = "handed-over"  # a successor serves the rest of the epoch (respawn, back-off)
    FAILED = "failed"  # a failure was raised; every later next() says so
    CLOSED = "closed"  # shut down


ON_ERROR_CHOICES = ("raise", "skip", "replace")


@dataclass(frozen=True)
class Settings:
    hang_timeout: float | None
    heal: bool
    on_error: str
    retries: int
    quarantine_path: str | None
    allow_in_process: bool
    # None: no stop (on_error="skip" without heal skips whatever it is asked to, as told)
    max_skipped: Budget | None = None
    max_deaths_in_a_row: int = MAX_DEATHS_IN_A_ROW

    @classmethod
    def from_keywords(
        cls,
        hang_timeout: float | None,
        heal: bool,
        on_error: str | None,
        retries: int | None,
        quarantine: str | os.PathLike[str] | None,
        allow_in_process: bool,
        max_skipped: object = None,
        max_deaths_in_a_row: int = MAX_DEATHS_IN_A_ROW,
    ) -> Settings:
        """The keyword-only extras of a supervised loader (``loaderdoctor.DataLoader`` and
        ``StatefulDataLoader`` alike), checked, with their defaults filled in; ValueError for a
        bad one."""
        if hang_timeout is not None and hang_timeout <= 0:
            raise ValueError("hang_timeout must be a positive number of seconds, or None")
        if on_error is None:
            on_error = "skip" if heal else "raise"
        if on_error not in ON_ERROR_CHOICES:
            choices = ", ".join(ON_ERROR_CHOICES)
            raise ValueError(f"on_error must be one of {choices}, got {on_error!r}")
        if retries is None:
            retries = 1 if on_error != "raise" else 0
        if retries < 0:
            raise ValueError("retries must be >= 0")
        if not isinstance(max_deaths_in_a_row, int) or max_deaths_in_a_row < 1:
            raise ValueError(
                f"max_deaths_in_a_row must be a whole number of deaths, 1 or more, got "
                f"{max_deaths_in_a_row!r}"
            )
        return cls(
            hang_timeout=hang_timeout,
            heal=heal,
            on_error=on_error,
            retries=retries,
            quarantine_path=os.fspath(quarantine) if quarantine is not None else None,
            allow_in_process=allow_in_process,
            max_skipped=_budget(max_skipped, heal),
            max_deaths_in_a_row=max_deaths_in_a_row,
        )


def _budget(max_skipped: object, heal: bool) -> Budget | None:
    """The skip budget: the user's, else the default where healing is on; None (no stop) for
    ``on_error`` without healing, whose user asked for every bad sample to be skipped."""
    if max_skipped is not None:
        return Budget.parse(max_skipped)
    return DEFAULT_BUDGET if heal else None


class LoaderSnapshot:
    """The loader as torch's iterator reads it, without the loader (nor its ``_iterator``).

    Holds the loader's instance attributes as they are now; the loader's properties
    (``_index_sampler``, ``_auto_collation``, ``multiprocessing_context``, ...) are evaluated on
    the snapshot, so any attribute a torch release reads is there. ``overrides`` replace values
    (the wrapped dataset, a resumed sampler, fewer workers).
    """

    def __init__(self, loader: Any, **overrides: Any) -> None:
        if isinstance(loader, LoaderSnapshot):
            values = dict(loader.__dict__)
        else:
            values = torch_compat.loader_state(loader)
            values.pop("_ld", None)  # the loader's own supervision: never a snapshot's
            values["_snapshot_of"] = type(loader)
        values.update(overrides)
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        cls = self.__dict__.get("_snapshot_of")
        if cls is None or name.startswith("__"):
            raise AttributeError(name)
        attribute = getattr(cls, name)  # AttributeError when the loader has none either
        binder = getattr(attribute, "__get__", None)
        # a property or method of the loader's class, evaluated on (bound to) the snapshot
        return binder(self, cls) if binder is not None else attribute

    def with_overrides(self, **overrides: Any) -> LoaderSnapshot:
        return LoaderSnapshot(self, **overrides)


@dataclass
class HealHistory:
    """What healing learnt from this loader's failures, which its later decisions read."""

    # Failures whose sample then loaded fine alone (a second one points at the pool)
    loaded_fine_alone: int = 0
    # Worker deaths and hangs since the last delivered batch that blamed no sample
    # (``HealPolicy``'s bound, ``max_deaths_in_a_row``)
    deaths_in_a_row: int = 0
    # The batches whose worker died in collate_fn (their indices)
    collate_deaths: set[str] = field(default_factory=set)
    # Samples delivered whole lately: the controls a verdict that blames a sample re-tries the
    # same way (``Supervision.control_sample``)
    delivered_samples: collections.deque[int] = field(
        default_factory=lambda: collections.deque(maxlen=8)
    )


class Supervision:
    """The state of one supervised loader that outlives its iterators."""

    def __init__(self, settings: Settings, dataset: Any, owner: Callable[[], Any]) -> None:
        self.settings = settings
        self.dataset = dataset
        self.log = IncidentLog(owner)
        self.counts = Counts()
        self.sample_actions = 0  # skips and replacements warned about (rate-limited)
        self.quarantine: dict[int, QuarantineEntry] = {}
        length = dataset_length(dataset)
        if settings.quarantine_path is not None:
            self.quarantine = read_quarantine(settings.quarantine_path, length)
        # Failures every sample shares, or skips past the budget: healing stops
        # (``repair.take_event``)
        self.shared = (
            SharedFailures(settings.max_skipped, length)
            if settings.max_skipped is not None
            else None
        )
        self.shared_stop: Diagnosis | None = None
        self.ragged = RaggedFields()  # samples skipped from batches that did not collate
        self.handles_warned = False  # a worker found a handle shared with the main process
        # feature -> why it is off for this loader (a protocol of the user's objects that raised)
        self.features_off: dict[str, str] = {}
        # Healing switched torch's sharing strategy (out of descriptors): workers started from
        # then on set it too (a spawned worker starts with torch's default)
        self.worker_sharing_strategy: str | None = None
        self.history = HealHistory()
        # The live pools' shared quarantines: each new entry reaches their workers at once
        # (``live_quarantine``), not only the batches the main process has not sent yet.
        self.live_quarantines: weakref.WeakSet[LiveQuarantine] = weakref.WeakSet()
        self.epoch = -1
        # Every worker process its iterators started, respawns included: the loader's own record
        # (``loaderdoctor run`` counts workers from it; sampling misses short-lived ones).
        self.worker_pids: set[int] = set()
        # The user's (num_workers, prefetch_factor): the top of the back-off ladder.
        self.base_settings = (0, 0)
        self.backoff: Backoff | None = None  # set at the first step down
        # Skip events that this loader's in-process iterators sent alone (a stream's last
        # items), read by ``repair.take_in_process_events``; the others travel with their batch.
        self.in_process_events: list[dict[str, Any]] = []
        # Workers cannot start at all (unpicklable, spawn bootstrapping) and healing is on.
        self.workers_cannot_start = False
        # Workers cannot start under the loader's start method, and healing forks them instead
        self.fallback_start_method: str | None = None
        # Each worker's oom_score_adj (raised right after its start; probes: higher still), and
        # why it could not be where it could not: the report says whether the protection is on.
        self.oom_score_adj = WORKER_OOM_SCORE_ADJ
        self.oom_notes: list[str] = []
        # loaderdoctor's own machinery failed and healing is on: plain torch loading from now on
        self.plain_torch = False
        # Told ``watcher(self, moment)`` when the records change: "iter" (an epoch starts),
        # "delivered" (a batch), "epoch-end", "stopped" (its workers shut down, an epoch left
        # early included). ``loaderdoctor run`` saves its counts from them.
        self.watchers: list[Callable[[Supervision, str], None]] = []
        # Silent data bugs (duplicated streams, frozen shuffles, stale workers, cloned randomness)
        self.data = DataWatch(dataset, owner)

    @classmethod
    def of(cls, loader: Any, settings: Settings) -> Supervision:
        """The supervision of a loader just built (its pool shape is what a back-off climbs
        back to)."""
        supervision = cls(settings, loader.dataset, weakref.ref(loader))
        supervision.base_settings = (loader.num_workers, loader.prefetch_factor or 0)
        return supervision

    @classmethod
    def of_probe(cls, settings: Settings, dataset: Any, oom_score_adj: int) -> Supervision:
        """The supervision of an isolated re-try: quiet (the loader it serves reports the
        outcome), its worker first in line for the OOM killer (``oom_score_adj``)."""
        supervision = cls(settings, dataset, lambda: None)
        supervision.log.quiet = True
        supervision.oom_score_adj = oom_score_adj
        return supervision

    # --- what happened to the pools ----------------------------------------------------------
    def epoch_started(self) -> BackoffStep | None:
        """The loader's ``__iter__``: one more epoch; the back-off step it climbs, if any."""
        self.epoch += 1
        self.data.epoch_started(self.epoch)
        self.tell_watchers("iter")
        return None if self.plain_torch else self.climb_at_epoch_start()

    def epoch_finished(self) -> None:
        """The epoch's iterator is exhausted (StopIteration reached the user)."""
        if self.backoff is not None:
            self.backoff.epoch_finished()
        self.data.epoch_finished()
        self.tell_watchers("epoch-end")

    def workers_started(self, pids: set[int], oom_notes: Sequence[str] = ()) -> None:
        """A pool's workers started: their pids, and why the OOM killer's order could not be
        set where it could not; each holds a copy of the dataset as it is now."""
        self.worker_pids |= pids
        self.oom_notes.extend(oom_notes)
        self.data.workers_started()

    def worker_replaced(self, pid: int) -> None:
        """One dead worker replaced alone: its pid. The data detectors are not told: the pool's
        other workers hold their copies of the dataset from the pool's start still."""
        self.worker_pids.add(pid)

    def starts_workers_instead(self, start_method: str | None) -> None:
        """Workers cannot start as the loader asks, and healing is on: fork them instead
        (``start_method``), or load in the main process (None)."""
        if start_method is not None:
            self.fallback_start_method = start_method
        else:
            self.workers_cannot_start = True

    def falls_back_to_plain_torch(self) -> None:
        """loaderdoctor's own machinery failed and healing is on."""
        self.plain_torch = True

    # --- recording -------------------------------------------------------------------------
    def delivered(self, indices: Any, batch: Any, samples: int | None = None) -> None:
        """One batch handed to the user: the loader's delivered counts (the only ones kept),
        counted here, at the delivery, from what the batch holds."""
        self.counts.batches += 1
        self.history.deaths_in_a_row = 0
        count = samples if samples is not None else samples_delivered(indices, batch)
        self.counts.samples += count
        if self.shared is not None:
            self.shared.delivered(count)
        self.data.delivered(indices, batch)
        self.tell_watchers("delivered")

    def delivered_batch(self, indices: Any, data: Any) -> Any:
        """A map-style batch handed to the user: counted, and unwrapped when a healing worker
        changed it (``repair.delivered_batch`` takes its samples' skips and replacements first)."""
        if isinstance(data, HealedBatch):
            self.delivered(indices, data.batch, data.samples)
            return data.batch
        self.delivered(indices, data)
        if isinstance(indices, list):
            self.history.delivered_samples.extend(i for i in indices[-2:] if type(i) is int)
        return data

    def control_sample(self, culprit: Any, loaded_ahead: Sequence[int] = ()) -> int | None:
        """A sample loaded whole earlier in this run (not ``culprit``, not quarantined): the
        control that clears the rest when ``culprit`` is re-tried alone; None when there is none.
        One delivered comes first; else one of ``loaded_ahead``, the samples of batches that
        came back ahead of their turn (the first batch can be the one that fails)."""
        for index in (*reversed(self.history.delivered_samples), *loaded_ahead):
            if index != culprit and index not in self.quarantine:
                return index
        return None

    def collate_death(self, indices: Any) -> bool:
        """A worker died collating the batch of ``indices``: True when one did before."""
        key = repr(list(indices))
        seen = key in self.history.collate_deaths
        self.history.collate_deaths.add(key)
        return seen

    def tell_watchers(self, moment: str) -> None:
        for watcher in self.watchers:
            watcher(self, moment)

    def step(self, direction: str, num_workers: int, prefetch_factor: int, reason: str) -> None:
        """One rung down or up the back-off ladder, recorded in the log's steps."""
        if self.backoff is None:
            self.backoff = Backoff(num_workers, prefetch_factor, *self.base_settings)
        self.backoff.moved_to(num_workers, prefetch_factor)
        self.log.step(BackoffStep(direction, num_workers, prefetch_factor, self.epoch, reason))

    def climb_at_epoch_start(self) -> BackoffStep | None:
        """Back up one rung when the last epoch was healthy; the step taken, or None."""
        backoff = self.backoff
        if backoff is None:
            return None
        step = None
        if backoff.climb_due(at_epoch_start=True):
            rung = backoff.rung_up()
            if rung is not None:
                self.step("up", rung[0], rung[1], "a whole epoch without an incident")
                step = self.log.steps[-1]
        backoff.epoch_started()
        return step

    def quarantine_add(self, index: Any, diagnosis: Diagnosis) -> bool:
        """Quarantine ``index``; False when a running pool's workers cannot be told (their
        table is full): only a new pool of workers would know it."""
        if not isinstance(index, int) or index in self.quarantine:
            return True
        self.quarantine[index] = QuarantineEntry(
            index=index,
            cause=diagnosis.cause,
            evidence=list(diagnosis.evidence)[:8],
            file=diagnosis.sample_file,
            when=quarantine_now(),
            loader=self.log.loader,
        )
        told = [live.add(index) for live in list(self.live_quarantines)]
        path = self.settings.quarantine_path
        if path is not None:
            write_quarantine(path, self.quarantine)
        return all(told)

    def feature_off(self, feature: str, reason: str) -> None:
        """A feature turned off for this loader (``containment``): warned once, then reported."""
        if feature in self.features_off:
            return
        self.features_off[feature] = reason
        warnings.warn(
            containment.warning_text(feature, reason), RuntimeWarning, stacklevel=user_stacklevel()
        )
        self.tell_watchers("features")

    def warn_shared_handles(self, event: dict[str, Any]) -> None:
        """A worker found handles of the main process in the dataset: warn once per loader."""
        if self.handles_warned:
            return
        self.handles_warned = True
        warnings.warn(shared_handles.warning_text(event), UserWarning, stacklevel=user_stacklevel())

    def blamed_for_a_death(self, index: Any, diagnosis: Diagnosis) -> Diagnosis | None:
        """A sample about to be quarantined for a death or hang counts as a failed sample, as
        an exception does: the verdict to raise when that makes the failure a shared one (the
        streak's samples leave the quarantine), else None."""
        if self.shared is None or not self.settings.heal:
            return None
        if self.shared_stop is not None:
            return self.shared_stop
        how = f"{diagnosis.title} ({diagnosis.signal})" if diagnosis.signal else diagnosis.title
        stop = self.shared.failed(index, diagnosis.cause, how)
        if stop is None:
            return None
        inherited = inherited_state(self.dataset)
        verdict = stop_diagnosis(replace(stop, likely=DEATHS_ALIKE), self.epoch, inherited)
        verdict.evidence[0:0] = [f"each worker showed: {diagnosis.title} [{diagnosis.cause}]"]
        verdict.worker_id, verdict.pid, verdict.signal = (
            diagnosis.worker_id,
            diagnosis.pid,
            diagnosis.signal,
        )
        if stop.reason == "shared":
            self.quarantine_release(stop.alike)
        self.shared_stop = verdict
        return verdict

    def quarantine_release(self, indices: Any) -> None:
        """Take samples out of the quarantine and its file (the live pools' append-only tables
        keep them: healing stops, so those pools load nothing more)."""
        released = [i for i in indices if isinstance(i, int) and i in self.quarantine]
        for index in released:
            del self.quarantine[index]
        path = self.settings.quarantine_path
        if released and path is not None:
            write_quarantine(path, self.quarantine)

    # --- what workers are told ---------------------------------------------------------------
    def sample_policy(self, drop_last: bool) -> SamplePolicy | None:
        settings = self.settings
        if settings.on_error == "raise" and not self.quarantine:
            return None
        on_error = settings.on_error
        if on_error == "skip" and _distributed():
            # Under DistributedSampler every rank must yield the same number of batches or the
            # next collective deadlocks: keep batches full instead of short or dropped.
            on_error = "replace"
        try:
            length: int | None = len(self.dataset)
        except TypeError:
            length = None
        return SamplePolicy(
            on_error=on_error,
            retries=settings.retries,
            quarantined=frozenset(self.quarantine),
            drop_last=drop_last,
            dataset_len=length,
        )

    def report(self) -> LoaderReport:
        report = build_report(self.log, sorted(self.quarantine), self.counts)
        report.oom_protection = self.oom_protection()
        report.data_findings = [finding.to_dict() for finding in self.data.findings]
        report.persistent_restarts = [restart.to_dict() for restart in self.data.restarts]
        report.features_off = dict(self.features_off)
        return report

    def oom_protection(self) -> str | None:
        """Whether its workers and probes go before the training process when memory runs out;
        None while no worker ran (``loaderdoctor run`` reports it too)."""
        if not self.worker_pids:
            return None
        return oom_protection(self.oom_score_adj, PROBE_OOM_SCORE_ADJ, self.oom_notes)


def _distributed() -> bool:
    import torch.distributed

    return bool(torch.distributed.is_available() and torch.distributed.is_initialized())


__all__ = ["ON_ERROR_CHOICES", "IterState", "LoaderSnapshot", "Settings", "Supervision"]
