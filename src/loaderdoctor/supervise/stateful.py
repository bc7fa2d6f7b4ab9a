"""torchdata's ``StatefulDataLoader``, supervised (issue 23 item 2).

``StatefulDataLoader`` subclasses torch's DataLoader but never calls its ``__init__``, and runs its
own iterator (``_StatefulMultiProcessingDataLoaderIter``, a fork of torch's) with its own worker
loop, which sends each batch with a delta of the worker's state. So the supervision is added to
*its* iterator, with the same parts as torch's: the workers see the dataset, collate_fn and
worker_init_fn wrapped (flight recorder, tagged exceptions, the sample policy), the main process
watches them (``WorkerWatch``), and every verdict goes to the loader's ``Supervision``.

Healing a dead worker uses torchdata's own resume: the iterator's ``state_dict()`` at the last
batch delivered is exactly where the rest of the epoch starts, so a new iterator built from it
(with the culprit quarantined, or re-tried once when it loaded alone) serves the rest: every
healthy sample exactly once, and ``state_dict()`` keeps torchdata's format. A heal that would
change ``num_workers`` (a back-off) is not possible here (torchdata's state records it): such a
failure is raised with its verdict.

A clean run takes torchdata's code path unchanged: same batches, same order, same seeds, same
``state_dict``.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import replace
from typing import Any, NoReturn

from loaderdoctor import torch_compat, torchdata_compat  # the latter imports torchdata
from loaderdoctor.forensics import Diagnosis, Evidence, diagnose
from loaderdoctor.forensics.reproduced import reproduced_alone
from loaderdoctor.forensics.verdict_text import format_death_headline, format_verdict
from loaderdoctor.recorder import Field, FlightRecorder
from loaderdoctor.supervise import live_quarantine
from loaderdoctor.supervise.errors import WorkerDiedError, WorkerHangError
from loaderdoctor.supervise.files import BOOTSTRAP_DIR_ENV
from loaderdoctor.supervise.heal import HealWarning, user_stacklevel
from loaderdoctor.supervise.heal_policy import Action, ActionKind, HealPolicy, Situation
from loaderdoctor.supervise.loader import (
    LOADER_HOOKS,
    DataLoader,
    _announce,
    _T_co,
    _unsupervised_reason,
    _warn_once,
)
from loaderdoctor.supervise.parent import hangs
from loaderdoctor.supervise.parent.events import EventReader
from loaderdoctor.supervise.parent.iterator import PoolLifetime, probe_batch, start_method_of
from loaderdoctor.supervise.parent.ledger import Ledger
from loaderdoctor.supervise.parent.pool import Pool
from loaderdoctor.supervise.parent.recovery import PoolFailure
from loaderdoctor.supervise.parent.result_queue import HalfMessage
from loaderdoctor.supervise.parent.supervision import (
    IterState,
    LoaderSnapshot,
    Settings,
    Supervision,
)
from loaderdoctor.supervise.parent.watch import WorkerWatch
from loaderdoctor.supervise.parent.worker_exceptions import worker_exception
from loaderdoctor.supervise.worker.collate import SupervisedCollate
from loaderdoctor.supervise.worker.datasets import SupervisedBatchedMapDataset, SupervisedMapDataset
from loaderdoctor.supervise.worker.hooks import SupervisedWorkerInit
from loaderdoctor.supervise.worker.loader_view import wrap_dataset
from loaderdoctor.supervise.worker.sample_policy import HealedBatch, SkippedBatch

POLICY = HealPolicy()
# What healing can do for a StatefulDataLoader: the same pool shape, resumed from its own state.
_HEALS = (ActionKind.RESPAWN, ActionKind.QUARANTINE, ActionKind.BACK_OFF)


class SupervisedStateful(torchdata_compat.HookedStatefulLoader):
    """What makes a ``StatefulDataLoader`` (or a subclass of it) supervised: mixed in before it.

    torchdata's ``__init__``, ``__iter__``, ``state_dict`` and ``load_state_dict`` run unchanged;
    only the multiprocessing iterator of a map-style dataset is the supervised one. An iterable
    dataset, or ``num_workers=0``, runs torchdata's own iterator (named, once, in a warning).
    """

    def __init__(
        self,
        *args: Any,
        hang_timeout: float | None = None,
        heal: bool = False,
        on_error: str | None = None,
        retries: int | None = None,
        quarantine: str | os.PathLike[str] | None = None,
        allow_in_process: bool = False,
        **kwargs: Any,
    ) -> None:
        settings = Settings.from_keywords(
            hang_timeout, heal, on_error, retries, quarantine, allow_in_process
        )
        super().__init__(*args, **kwargs)
        loader: Any = self
        loader._ld = Supervision.of(loader, settings)
        loader._ld_unsupervised = _unsupervised_reason([]) or _unsupported_reason(loader)
        for hook in list(LOADER_HOOKS):
            hook(self)

    incidents = DataLoader.incidents
    report = DataLoader.report

    def ld_get_iterator(self) -> Any:
        loader: Any = self
        sup = loader._ld
        if loader._ld_unsupervised is not None or loader.num_workers == 0:
            if loader._ld_unsupervised is not None:
                _warn_once(loader, loader._ld_unsupervised)
            return super().ld_get_iterator()
        loader.check_worker_number_rationality()
        snapshot = LoaderSnapshot(loader)
        if sup.backoff is not None:  # a heal lowered prefetch_factor (never num_workers)
            snapshot = snapshot.with_overrides(prefetch_factor=sup.backoff.prefetch_factor)
        iterator = SupervisedStatefulIter(snapshot, loader.next_iter_state, sup)
        loader.next_iter_state = None
        return iterator

    def __iter__(self) -> Any:
        loader: Any = self
        sup = loader._ld
        sup.epoch += 1
        sup.tell_watchers("iter")
        # torchdata starts a new iterator each epoch (unless persistent_workers): it takes the
        # prefetch_factor climbed back to
        _announce(sup.climb_at_epoch_start())
        return super().__iter__()  # type: ignore[misc]


def _unsupported_reason(loader: Any) -> str | None:
    if torch_compat.is_iterable(loader):
        return (
            "loaderdoctor supervises a StatefulDataLoader of a map-style dataset; this one's "
            "dataset is iterable: it runs as plain torchdata, unsupervised."
        )
    if not loader.in_order:
        return (
            "loaderdoctor supervises a StatefulDataLoader with in_order=True; this one runs as "
            "plain torchdata, unsupervised."
        )
    return None


class StatefulDataLoader(SupervisedStateful, torchdata_compat.StatefulDataLoader[_T_co]):
    """A drop-in, supervised ``torchdata.stateful_dataloader.StatefulDataLoader``.

    Generic as torchdata's is: ``StatefulDataLoader[List[Tensor]]`` in an annotation, and
    ``class X(StatefulDataLoader[T])``.

    Takes every argument of torchdata's and behaves identically while nothing fails (same
    batches, order, seeds and ``state_dict``); the keyword-only extras of
    ``loaderdoctor.DataLoader`` (``hang_timeout``, ``heal``, ``on_error``, ``retries``,
    ``quarantine``, ``allow_in_process``) work as there.
    """


class _ForwardsState:
    """A supervised wrapper of a dataset that has its own ``state_dict``: torchdata's worker
    saves and restores the dataset's state through the wrapper, unchanged."""

    dataset: Any

    def state_dict(self) -> Any:
        return self.dataset.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.dataset.load_state_dict(state)


class _StatefulMapDataset(_ForwardsState, SupervisedMapDataset):
    pass


class _StatefulBatchedMapDataset(_ForwardsState, SupervisedBatchedMapDataset):
    pass


def _wrapped(dataset: Any, dataset_kind: int, policy: Any) -> Any:
    wrapped = wrap_dataset(dataset, dataset_kind, policy)
    if not isinstance(dataset, torchdata_compat.Stateful):
        return wrapped
    if type(wrapped) is SupervisedMapDataset:
        return _StatefulMapDataset(dataset, policy)
    if type(wrapped) is SupervisedBatchedMapDataset:
        return _StatefulBatchedMapDataset(dataset)
    return wrapped


class SupervisedStatefulIter(PoolLifetime, torchdata_compat.HookedStatefulIter):
    """torchdata's multiprocessing iterator with a watch on every worker."""

    def __init__(
        self,
        snapshot: LoaderSnapshot,
        next_iter_state: Any,
        supervision: Supervision,
        respawns: int = 0,
    ) -> None:
        self._ld_sup = supervision
        self._ld_respawns = respawns  # pools this epoch rebuilt before this one (MAX_RESPAWNS)
        self._ld_snapshot = snapshot
        self._ld_state = IterState.RUNNING
        self._ld_failure: tuple[str, Diagnosis | None] = ("", None)
        self._ld_successor: Any = None
        self._ld_epoch = supervision.epoch
        self._ld_ledger = Ledger()
        self._ld_last_index: Any = None
        self._ld_watch: WorkerWatch | None = None
        # torchdata replays the steps since its last snapshot when it resumes: those batches
        # were delivered before, and are not counted again
        self._ld_replaying = next_iter_state is not None
        self._ld_make_log_dir()
        self._ld_events = EventReader(self._ld_log_dir, supervision.take_event)
        self._ld_recorder = FlightRecorder(snapshot.num_workers)
        for worker_id in range(snapshot.num_workers):
            self._ld_recorder.reset_slot(worker_id)
        self._ld_books = torch_compat.IteratorBooks(self)
        policy = supervision.sample_policy(snapshot.drop_last)
        collate = SupervisedCollate(snapshot.collate_fn, heal=policy is not None)
        view = snapshot.with_overrides(
            dataset=_wrapped(snapshot.dataset, torch_compat.dataset_kind(snapshot), policy),
            collate_fn=collate,
            worker_init_fn=SupervisedWorkerInit(
                snapshot.worker_init_fn,
                self._ld_recorder,
                self._ld_log_dir,
                snapshot.dataset,
                hang_timeout=supervision.settings.hang_timeout,
                oom_score_adj=supervision.oom_score_adj,
                # map-style only here (a stream runs as plain torchdata)
                live_quarantine=live_quarantine.for_pool(supervision, False),
                collate=collate,
            ),
        )
        previous = os.environ.get(BOOTSTRAP_DIR_ENV)
        os.environ[BOOTSTRAP_DIR_ENV] = self._ld_log_dir
        failure: PoolFailure | None = None
        try:
            super().__init__(view, next_iter_state)
        except PoolFailure as caught:  # a worker died or hung before the first batch
            failure = caught
        finally:
            if previous is None:
                os.environ.pop(BOOTSTRAP_DIR_ENV, None)
            else:
                os.environ[BOOTSTRAP_DIR_ENV] = previous
            self._ld_replaying = False
        if failure is not None:
            evidence, failure = failure.evidence, None  # no cycle through its traceback
            self._ld_raise(evidence, diagnose(evidence))

    def _ld_watching(self) -> WorkerWatch:
        """The watch on the pool, made at the first wait (torchdata's ``__init__`` waits for its
        workers' first state before it returns)."""
        if self._ld_watch is None:
            # A dead worker must never make torch's SIGCHLD handler raise at a random line.
            torch_compat.stop_sigchld_checks(self)
            snapshot = self._ld_snapshot
            pool = Pool(*self.ld_processes(), self._ld_log_dir)
            self._ld_pool = pool
            pool.first_for_oom_killer(self._ld_sup.oom_score_adj)
            self._ld_sup.oom_notes.extend(pool.oom_notes)
            self._ld_sup.worker_pids |= pool.pids()
            self._ld_watch = WorkerWatch(
                pool,
                self._ld_recorder,
                self._ld_ledger,
                dataset=snapshot.dataset,
                start_method=start_method_of(snapshot),
                iterable=False,
                hang_timeout=self._ld_sup.settings.hang_timeout,
                epoch=self._ld_epoch,
                parts=(
                    ("dataset", snapshot.dataset),
                    ("collate_fn", snapshot.collate_fn),
                    ("worker_init_fn", snapshot.worker_init_fn),
                ),
            )
        return self._ld_watch

    # --- bookkeeping of what each batch holds ----------------------------------------------
    def ld_next_index(self) -> Any:
        index = super().ld_next_index()
        self._ld_last_index = index
        return index

    def ld_try_put_index(self) -> None:
        sent = self.ld_sent
        super().ld_try_put_index()
        if self.ld_sent != sent:
            self._ld_ledger.owe(sent, self._ld_last_index)

    def ld_reset(self, loader: Any, first_iter: bool = False, prime_prefetch: bool = True) -> None:
        if not first_iter:
            self._ld_ledger.clear()
            self._ld_epoch = self._ld_sup.epoch
            if self._ld_watch is not None:
                self._ld_watch.epoch = self._ld_epoch
            if self._ld_successor is not None:  # persistent workers: the successor's pool
                self._ld_successor.ld_reset(loader)
                self.ld_finished = False
                return
        super().ld_reset(loader, first_iter, prime_prefetch)

    # --- waiting for data, watching the workers --------------------------------------------
    def ld_try_get_data(self, timeout: float = torch_compat.MP_STATUS_CHECK_INTERVAL) -> Any:
        try:
            return self._ld_watching().wait(self, self._ld_books, timeout)
        except HalfMessage as stalled:
            half = stalled.evidence
        raise PoolFailure(half)  # healing rebuilds the pool (and its result queue) in any case

    def ld_get_data(self) -> Any:
        timeout = self.ld_timeout
        if timeout <= 0:
            return super().ld_get_data()
        success, data = self.ld_try_get_data(timeout)
        if not success:  # the loader's own timeout ran out: the worker that owes the batch hangs
            in_turn, tasks = self.ld_task_in_turn, self._ld_books.task_info
            raise PoolFailure(self._ld_watching().timed_out(in_turn, tasks, timeout))
        return data

    def ld_process_data(self, data: Any, worker_id: int, state_dict: Any) -> Any:
        task, indices, _ = self._ld_ledger.settle_handed_over(self._ld_books.task_info)
        sup = self._ld_sup
        self._ld_events.drain_if_new(self._ld_recorder.total(Field.EVENTS))
        if torch_compat.is_exception_wrapper(data):
            self.ld_task_done(worker_id)
            self.ld_try_put_index()
            ev = self._ld_watching().base("exception", worker_id)
            ev.batch = task
            error, diagnosis = worker_exception(data, ev, indices, self._ld_snapshot.dataset)
            try:
                sup.record(diagnosis, "raised")
                raise error
            finally:
                error = None  # type: ignore[assignment]  # no cycle via its traceback
        if self._ld_replaying:
            data = data.batch if isinstance(data, HealedBatch) else data
        elif isinstance(data, SkippedBatch):
            sup.take_events(data.events)
        elif task is not None:
            data = sup.delivered_batch(indices, data)
        return super().ld_process_data(data, worker_id, state_dict)

    # --- the decision point ----------------------------------------------------------------
    def ld_next_data(self) -> Any:
        while True:
            if self._ld_state is IterState.FAILED:
                from loaderdoctor.supervise.errors import LoaderError

                message, diagnosis = self._ld_failure
                raise LoaderError(
                    f"this DataLoader iterator stopped after an earlier failure: {message}",
                    diagnosis,
                )
            if self._ld_state is IterState.HANDED_OVER:
                data = next(self._ld_successor)
            else:
                failure: PoolFailure | None = None
                try:
                    data = super().ld_next_data()
                except PoolFailure as caught:
                    failure = caught
                except StopIteration:
                    self._ld_epoch_done()
                    raise
                if failure is not None:
                    try:
                        self._ld_handle(failure.evidence)
                    finally:
                        failure = None  # no reference cycle through its traceback
                    continue
            if isinstance(data, SkippedBatch):
                continue
            return data

    def _ld_epoch_done(self) -> None:
        self._ld_events.drain()
        self._ld_sup.tell_watchers("epoch-end")

    def _ld_handle(self, ev: Evidence) -> None:
        """A worker died or hung: raise its verdict, or heal by resuming from torchdata's own
        state at the last batch delivered."""
        diagnosis = diagnose(ev)
        sup = self._ld_sup
        action = self._ld_decide(ev, diagnosis)
        if action.kind not in _HEALS:
            self._ld_raise(ev, diagnosis)
        if action.note:
            diagnosis.evidence.append(action.note)
        culprit = ev.in_flight_index
        if action.kind is ActionKind.QUARANTINE:
            sup.quarantine_add(culprit, diagnosis)
        snapshot = self._ld_snapshot
        if action.kind is ActionKind.BACK_OFF:  # the same workers, fewer batches in flight
            diagnosis.evidence.append(
                f"continuing with num_workers={action.num_workers}, "
                f"prefetch={action.prefetch_factor}"
            )
            sup.step("down", action.num_workers, action.prefetch_factor, diagnosis.cause)
            snapshot = snapshot.with_overrides(prefetch_factor=action.prefetch_factor)
        state = self.state_dict()  # torchdata's own: where the rest of the epoch starts
        self._ld_stop()
        diagnosis.evidence.append(
            "a new worker pool resumed from the loader's state_dict at the last batch delivered"
        )
        sup.record(diagnosis, action.kind.value)
        detail = f" (sample {culprit!r})" if culprit is not None else ""
        warnings.warn(
            f"loaderdoctor healed: {diagnosis.title} [{diagnosis.cause}] -> "
            f"{action.kind.value}{detail}",
            HealWarning,
            stacklevel=user_stacklevel(),
        )
        self._ld_successor = SupervisedStatefulIter(snapshot, state, sup, self._ld_respawns + 1)
        self._ld_state = IterState.HANDED_OVER

    def _ld_decide(self, ev: Evidence, diagnosis: Diagnosis) -> Action:
        """The policy's decision, the culprit re-tried alone where it asks; a back-off that
        would change num_workers (torchdata's state records it) respawns the same pool."""
        books = self._ld_books
        at = Situation(
            heal=self._ld_sup.settings.heal,
            iterable=False,
            respawns=self._ld_respawns,
            num_workers=books.num_workers,
            prefetch_factor=books.prefetch_factor,
            kind=ev.kind,
            stage=ev.stage,
            reached_worker_init=ev.reached_worker_init,
            culprit=ev.in_flight_index,
            culprit_quarantined=ev.in_flight_index in self._ld_sup.quarantine,
            in_process_allowed=False,
        )
        action = POLICY.decide(diagnosis, at)
        if action.kind is ActionKind.PROBE:
            found = probe_batch(self._ld_snapshot, [ev.in_flight_index])
            outcome = found if isinstance(found, str) else found is not None
            if isinstance(outcome, str):
                self._ld_sup.counts.probe_failures += 1
                action = POLICY.decide(diagnosis, replace(at, probe_error=outcome))
            else:
                action = POLICY.decide(diagnosis, replace(at, probe_failed_again=outcome))
                if outcome and action.kind is ActionKind.QUARANTINE:
                    reproduced_alone(diagnosis, ev.in_flight_index)
                    action = replace(action, note="")
        if action.kind is ActionKind.BACK_OFF and action.num_workers != books.num_workers:
            action = replace(
                action,
                kind=ActionKind.RESPAWN,
                num_workers=books.num_workers,
                prefetch_factor=books.prefetch_factor,
                note=(
                    f"a StatefulDataLoader keeps num_workers={books.num_workers} (its "
                    "state_dict records it): respawned instead of backing off"
                ),
            )
        return action

    def _ld_raise(self, ev: Evidence, diagnosis: Diagnosis) -> NoReturn:
        self._ld_sup.record(diagnosis, "raised")
        headline = next(
            (n for n in ev.notes if n.startswith(hangs.TIMEOUT_PREFIX)),
            format_death_headline(diagnosis),
        )
        message = f"{headline}\n{format_verdict(diagnosis)}"
        error_type = WorkerHangError if ev.kind == "hang" else WorkerDiedError
        self._ld_failure = (message, diagnosis)
        self._ld_state = IterState.FAILED
        self._ld_stop()
        raise error_type(message, diagnosis)

    def _ld_stop(self) -> None:
        pool = getattr(self, "_ld_pool", None)
        if pool is not None:
            pool.stop(self._ld_books.workers_status)
        self.ld_shutdown_workers()

    # --- torchdata's state, and the end ----------------------------------------------------
    def state_dict(self) -> Any:
        if self._ld_successor is not None:
            return self._ld_successor.state_dict()
        return super().state_dict()


__all__ = ["StatefulDataLoader", "SupervisedStateful", "SupervisedStatefulIter"]
