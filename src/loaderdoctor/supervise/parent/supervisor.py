"""What torch's and torchdata's supervised multiprocessing iterators share: ``SupervisedPool``.

It owns the pool's named parts and the hook bodies; each library's iterator is an adapter that
translates its hooks into these calls (``iterator.SupervisedMultiProcessingIter`` for torch's,
``stateful.SupervisedStatefulIter`` for torchdata's):

* ``Ledger``: the batches handed to workers and not yet delivered (``ledger``);
* ``WorkerWatch.wait`` / ``poll() -> Evidence | None``: a dead, stuck or mute worker (``watch``);
* ``Recovery.handle(failure) -> Resumed | HandOver | Raise``: what is done about it, the one place
  that acts on a failure (``recovery``), on what ``HealPolicy.decide`` says (``heal_policy``);
* ``Pool``: the worker processes, their liveness and a fast stop (``pool``);
* ``Supervision``: what the loader and its iterators share: the append-only ``IncidentLog``, the
  counts, the quarantine, the back-off ladder (``supervision``).

Its state is an ``IterState``. A failure found inside torch's ``_next_data`` leaves it as a
``PoolFailure``; ``ld_next_data`` hands it to ``Recovery`` and turns the outcome into going on
(a worker replaced alone), a successor iterator (a rebuilt pool serves the rest of the epoch;
torch's ``__init__`` never runs twice on one object) or a raise.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch

from loaderdoctor import torch_compat
from loaderdoctor.forensics import Diagnosis
from loaderdoctor.forensics.origin import origin_of
from loaderdoctor.recorder import Field, FlightRecorder
from loaderdoctor.supervise import files, live_quarantine
from loaderdoctor.supervise.errors import HealingStoppedError, LoaderError
from loaderdoctor.supervise.heal import HealWarning, user_stacklevel
from loaderdoctor.supervise.heal_policy import owed_again
from loaderdoctor.supervise.parent import collect
from loaderdoctor.supervise.parent.collect import EventReader
from loaderdoctor.supervise.parent.ledger import Ledger
from loaderdoctor.supervise.parent.pool import Pool
from loaderdoctor.supervise.parent.recovery import HandOver, Outcome, Raise, Recovery, Successor
from loaderdoctor.supervise.parent.single_process import internal_evidence
from loaderdoctor.supervise.parent.supervision import IterState, LoaderSnapshot, Supervision
from loaderdoctor.supervise.parent.watch import HalfMessage, PoolFailure, WorkerWatch
from loaderdoctor.supervise.parent.worker_exceptions import worker_exception
from loaderdoctor.supervise.streams import StreamBatch, StreamProgress, new_stream_progress
from loaderdoctor.supervise.worker.collate import SupervisedCollate
from loaderdoctor.supervise.worker.hooks import SupervisedWorkerInit
from loaderdoctor.supervise.worker.loader_view import wrap_dataset
from loaderdoctor.supervise.worker.sample_policy import HealedBatch, SkippedBatch


def start_method_of(loader: Any) -> str:
    context = loader.multiprocessing_context or multiprocessing
    method = context.get_start_method(allow_none=True)
    return method or multiprocessing.get_all_start_methods()[0]


def _generator_state(snapshot: LoaderSnapshot) -> torch.Tensor:
    """Replayed by a successor so that its pool draws the same base seed as this one without
    consuming the user's generator (which would shift every later epoch)."""
    return (snapshot.generator or torch.default_generator).get_state()


# What ``_ld_attempt`` returns for a step whose failure was handled (never a batch).
_HANDLED = object()


def _remove_log_dir(path: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # never from a forked child that inherited the finalizer
        shutil.rmtree(path, ignore_errors=True)


class SupervisedPool(torch_compat.MultiProcessingHooks):
    """What torch's and torchdata's supervised multiprocessing iterators share: the pool's
    parts, the hook bodies and the one place a failure is handed to ``Recovery``. Each adapter
    (``SupervisedMultiProcessingIter`` here, ``SupervisedStatefulIter`` for torchdata) only
    translates its library's hooks into these calls: the parameters of ``_reset`` and
    ``_process_data`` differ, and torchdata resumes a pool from its own state."""

    _ld_state: IterState
    # Class defaults: torch's __del__ shuts a pool down even when its __init__ failed early
    _ld_successor: Any = None
    _ld_pool: Pool | None = None
    _ld_events: EventReader
    _ld_log_dir: str
    _ld_cleanup: weakref.finalize[Any, Any]
    _ld_watch: WorkerWatch | None
    _ld_recovery: Recovery

    def _ld_init_state(
        self,
        snapshot: LoaderSnapshot,
        supervision: Supervision,
        respawns: int,
        streams: StreamProgress | None,
        *,
        successor: Callable[[Successor], Any],
        probe: Callable[[LoaderSnapshot, list[Any]], Any],
        resume_point: Callable[[], Any] | None = None,
    ) -> None:
        self._ld_sup = supervision
        self._ld_snapshot = snapshot  # the user's loader as it was, for successors and probes
        self._ld_state = IterState.RUNNING
        # (message, verdict) of the failure that stopped it; not the exception, whose traceback
        # would hold this iterator in a reference cycle
        self._ld_failure: tuple[str, Diagnosis | None] = ("", None)
        self._ld_successor = None
        self._ld_epoch = supervision.epoch
        self._ld_ledger = Ledger()
        self._ld_last_index: Any = None
        self._ld_raising: BaseException | None = None
        self._ld_watch = None
        # torchdata replays the steps since its last snapshot when it resumes: those batches
        # were delivered before, and are not counted again
        self._ld_replaying = False
        self._ld_start_method = start_method_of(snapshot)
        self._ld_context = torch_compat.multiprocessing_context_of(snapshot)
        self._ld_iterable = torch_compat.is_iterable(snapshot)
        self._ld_log_dir = collect.make_log_dir()
        self._ld_cleanup = weakref.finalize(self, _remove_log_dir, self._ld_log_dir, os.getpid())
        # IterableDataset: where each worker's stream stands; a re-started pool resumes from it
        progress = streams if streams is not None else new_stream_progress(snapshot)
        self._ld_resuming = streams is not None  # a successor: its workers resume their streams
        self._ld_events = EventReader(
            self._ld_log_dir,
            supervision.take_event
            if progress is None
            else progress.take_events(supervision.take_event),
        )
        self._ld_recorder = FlightRecorder(snapshot.num_workers)
        for worker_id in range(snapshot.num_workers):
            self._ld_recorder.reset_slot(worker_id)
        self._ld_books = torch_compat.IteratorBooks(self)
        self._ld_recovery = Recovery(
            self._ld_books,
            snapshot,
            supervision,
            self._ld_ledger,
            self._ld_recorder,
            self._ld_events,
            streams=progress,
            respawns=respawns,
            context=self._ld_context,
            probe=probe,
            successor=successor,
            generator_state=_generator_state(snapshot),
            resume_point=resume_point,
        )

    @property
    def _ld_streams(self) -> StreamProgress | None:
        """IterableDataset: where each worker's stream stands; a re-started pool resumes from it."""
        return self._ld_recovery.streams

    def _ld_view(self, snapshot: LoaderSnapshot) -> LoaderSnapshot:
        """The loader as the workers see it: the dataset, collate_fn and init wrapped."""
        supervision = self._ld_sup
        policy = supervision.sample_policy(snapshot.drop_last)
        dataset = wrap_dataset(snapshot.dataset, torch_compat.dataset_kind(snapshot), policy)
        self._ld_recovery.learns(dataset)
        collate = SupervisedCollate(snapshot.collate_fn, heal=policy is not None)
        return snapshot.with_overrides(
            dataset=dataset,
            collate_fn=collate,
            worker_init_fn=SupervisedWorkerInit(
                snapshot.worker_init_fn,
                self._ld_recorder,
                self._ld_log_dir,
                snapshot.dataset,
                hang_timeout=supervision.settings.hang_timeout,
                oom_score_adj=supervision.oom_score_adj,
                sharing_strategy=supervision.worker_sharing_strategy,
                live_quarantine=live_quarantine.for_pool(supervision, self._ld_iterable),
                stream_resumes=(
                    self._ld_streams.resumes(snapshot.num_workers)
                    if self._ld_streams is not None and self._ld_resuming
                    else None
                ),
                collate=collate,
            ),
        )

    def _ld_bootstrapping(self) -> contextlib.AbstractContextManager[None]:
        """While torch's (or torchdata's) ``__init__`` starts the workers: a spawned worker that
        re-runs the main script finds this pool's folder."""
        return files.bootstrap_dir(self._ld_log_dir)

    def _ld_watching(self) -> WorkerWatch:
        """The watch on the pool, made once torch's ``__init__`` has started the workers (at
        once for torch's iterator; at the first wait for torchdata's, whose ``__init__`` waits
        for its workers' first state before it returns)."""
        if self._ld_watch is not None:
            return self._ld_watch
        # A dead worker must never make torch's SIGCHLD handler raise at a random line.
        torch_compat.stop_sigchld_checks(self)
        snapshot = self._ld_snapshot
        pool = Pool(self._ld_books.processes(), self._ld_log_dir)
        self._ld_pool = pool
        pool.first_for_oom_killer(self._ld_sup.oom_score_adj)
        self._ld_sup.workers_started(pool.pids(), pool.oom_notes)
        self._ld_watch = WorkerWatch(
            pool,
            self._ld_recorder,
            self._ld_ledger,
            dataset=snapshot.dataset,
            start_method=self._ld_start_method,
            iterable=self._ld_iterable,
            hang_timeout=self._ld_sup.settings.hang_timeout,
            epoch=self._ld_epoch,
            parts=(
                ("dataset", snapshot.dataset),
                ("collate_fn", snapshot.collate_fn),
                ("worker_init_fn", snapshot.worker_init_fn),
            ),
        )
        self._ld_recovery.watches(pool, self._ld_watch)
        return self._ld_watch

    # --- bookkeeping of what each batch holds -------------------------------------------------
    def ld_next_index(self) -> Any:
        index = super().ld_next_index()
        self._ld_last_index = index
        return index

    def ld_try_put_index(self) -> None:
        sent = self._ld_books.sent
        super().ld_try_put_index()
        if self._ld_books.sent != sent:
            self._ld_recovery.owe(sent, self._ld_last_index)

    def _ld_new_epoch(self) -> None:
        """torch's ``_reset`` of persistent workers starts another epoch on this pool."""
        self._ld_epoch = self._ld_sup.epoch
        if self._ld_watch is not None:
            self._ld_watch.epoch = self._ld_epoch
        recovery = self._ld_recovery
        streams = recovery.streams
        recovery.new_epoch(None if streams is None else new_stream_progress(self._ld_snapshot))

    # --- waiting for data, watching the workers -------------------------------------------
    def ld_try_get_data(self, timeout: float = torch_compat.MP_STATUS_CHECK_INTERVAL) -> Any:
        try:
            return self._ld_watching().wait(self._ld_books, timeout)
        except HalfMessage as stalled:
            half = stalled.evidence
        self._ld_recovery.result_queue_unreadable()
        raise PoolFailure(half)

    def ld_get_data(self) -> Any:
        timeout = self._ld_books.timeout
        if timeout > 0:
            success, data = self.ld_try_get_data(timeout)
            if success:
                return data
            books = self._ld_books
            raise PoolFailure(
                self._ld_watching().timed_out(books.task_in_turn, books.task_info, timeout)
            )
        return super().ld_get_data()

    def _ld_received(self, data: Any, worker_id: int) -> Any:
        """A batch torch is about to hand over: counted, unwrapped, or its worker's exception
        raised (for healing, a ``PoolFailure`` when the batch is still owed)."""
        task, indices = self._ld_ledger.settle_handed_over(self._ld_books.task_info)
        sup = self._ld_sup
        self._ld_events.drain_if_new(self._ld_recorder.total(Field.EVENTS))
        if torch_compat.is_exception_wrapper(data):
            self._ld_books.task_done(worker_id)
            self.ld_try_put_index()
            ev = self._ld_watching().base("exception", worker_id)
            ev.batch = task
            error, diagnosis = worker_exception(data, ev, indices, self._ld_snapshot.dataset)
            try:
                if sup.settings.heal and owed_again(diagnosis) and task is not None:
                    self._ld_ledger.owe(task, indices)  # still owed to the user
                    raise PoolFailure(ev, error, diagnosis)
                sup.record(diagnosis, "raised")
                self._ld_raising = error  # raised on purpose: the user's, not an internal error
                raise error
            finally:
                error = None  # type: ignore[assignment]  # no cycle via its traceback
        if self._ld_replaying:  # delivered before the state this pool resumed from
            return data.batch if isinstance(data, HealedBatch) else data
        if isinstance(data, StreamBatch):
            return self._ld_stream_delivered(data, indices, counted=task is not None)
        if isinstance(data, SkippedBatch):
            if task is not None:
                sup.take_events(data.events)
        elif task is not None:
            data = sup.delivered_batch(indices, data)
            if sup.backoff is not None:
                sup.backoff.delivered()
        elif isinstance(data, HealedBatch):
            data = data.batch
        return data

    # --- the decision point ---------------------------------------------------------------
    def ld_next_data(self) -> Any:
        while True:
            if self._ld_state is IterState.FAILED:
                message, diagnosis = self._ld_failure
                raise LoaderError(
                    f"this DataLoader iterator stopped after an earlier failure: {message}",
                    diagnosis,
                )
            if self._ld_state is IterState.HANDED_OVER:
                data = self._ld_from_successor()
            else:
                try:
                    data = self._ld_attempt(super().ld_next_data)
                except StopIteration:
                    self._ld_epoch_done()
                    raise
                if data is _HANDLED:
                    continue
                if self._ld_sup.backoff is not None:
                    self._ld_carry_out(self._ld_recovery.climb())
            if isinstance(data, SkippedBatch):
                continue
            return data

    def _ld_attempt(self, step: Callable[[], Any], *, building: bool = False) -> Any:
        """Run a step of the library's own code that may meet a failed worker (a ``PoolFailure``
        out of the watch, or an exception of loaderdoctor's own code): its value, or
        ``_HANDLED`` once ``Recovery`` has dealt with the failure and the pool goes on (or hands
        over); a failure that is the user's answer is raised from here. The one place a pool
        failure is caught. ``building``: inside the iterator's ``__init__``, before a batch was
        delivered: there is nothing to resume from yet."""
        failure: PoolFailure | None = None
        try:
            return step()
        except PoolFailure as caught:
            failure = caught
        except StopIteration:
            raise
        except Exception as error:  # broad on purpose: ours become internal-error
            deliberate = error is self._ld_raising or isinstance(error, HealingStoppedError)
            self._ld_raising = None  # holding it would be a cycle through its frames
            if deliberate or origin_of(error) is None:
                raise  # the user's (or torch's) exception, with its verdict
            failure = PoolFailure(internal_evidence(error, self._ld_epoch), error)
        try:
            recovery = self._ld_recovery
            self._ld_carry_out(recovery.give_up(failure) if building else recovery.handle(failure))
        finally:
            # An exception kept in a local of this frame holds the frame (and so this
            # iterator) in a reference cycle through its traceback.
            failure = None
        return _HANDLED

    def _ld_carry_out(self, outcome: Outcome | None) -> None:
        """Go on (``Resumed``, None), serve from a successor, or raise."""
        if isinstance(outcome, HandOver):
            self._ld_successor = outcome.successor
            self._ld_state = IterState.HANDED_OVER
        elif isinstance(outcome, Raise):
            error, outcome.error = outcome.error, None
            if outcome.failure is not None:
                self._ld_failure = outcome.failure
                self._ld_state = IterState.FAILED
            assert error is not None
            try:
                raise error
            finally:
                error = None  # a raised exception kept in a local is a cycle through its frame

    def _ld_from_successor(self) -> Any:
        successor = self._ld_successor
        try:
            data = torch_compat.next_data(successor)
        except StopIteration:
            self._ld_epoch_done()
            raise
        finally:
            # A successor that handed over in turn: follow the chain to the live one.
            # (detached first: a dropped iterator shuts its successor down with it).
            while (
                isinstance(successor, SupervisedPool)
                and successor._ld_state is IterState.HANDED_OVER
            ):
                successor._ld_successor, successor = None, successor._ld_successor
            self._ld_successor = successor
        return data

    def _ld_epoch_done(self) -> None:
        self._ld_events.drain()
        if self._ld_sup.backoff is not None:
            self._ld_sup.backoff.epoch_finished()
        self._ld_sup.tell_watchers("epoch-end")

    # --- streams (IterableDataset): positions delivered, culprits skipped ---------------------
    def _ld_stream_delivered(self, batch: StreamBatch, indices: Any, counted: bool) -> Any:
        """Unwrap a stream worker's batch; its positions advance that worker's stream."""
        streams = self._ld_streams
        if streams is None:  # a StreamBatch reaches only the iterator of a stream
            return batch.batch
        streams.delivered(batch)
        if counted:
            self._ld_sup.take_events(batch.events)
            # counted by what it holds: a stream that batches itself yields whole batches
            self._ld_sup.delivered(indices, batch.batch)
            if self._ld_sup.backoff is not None:
                self._ld_sup.backoff.delivered()
        for note in streams.notes:
            warnings.warn(f"loaderdoctor: {note}", HealWarning, stacklevel=user_stacklevel())
            if streams.incident is not None:
                streams.incident.evidence.append(note)
        streams.notes.clear()
        return batch.batch

    def ld_mark_worker_as_unavailable(self, worker_id: int, shutdown: bool = False) -> None:
        if not shutdown and self._ld_streams is not None:
            self._ld_streams.ended(worker_id)  # its stream ended: a re-started one stays ended
        super().ld_mark_worker_as_unavailable(worker_id, shutdown)

    # --- the end ----------------------------------------------------------------------------
    def _ld_drain(self) -> None:
        """Read the events written so far (``loader.report`` asks, mid-epoch)."""
        if self._ld_state is IterState.RUNNING and not self._ld_books.is_shut_down():
            self._ld_events.drain()
        successor = self._ld_successor
        if isinstance(successor, SupervisedPool):
            successor._ld_drain()

    def ld_shutdown_workers(self) -> None:
        # At exit Python may have emptied this module's globals, or torch_compat's, before a
        # loader kept in a global is collected (persistent workers, torchdata's iterator): then
        # torch_compat, or its function, is None
        exiting = None if torch_compat is None else torch_compat.interpreter_exiting
        if exiting is None or exiting():
            return  # torch's own exit handlers stop the workers
        pool = self._ld_pool
        if pool is not None and not pool.owned_here():
            # A forked child inherited this iterator: its workers are not this process's
            # children, so there is nothing to stop (and torch's join would raise here).
            self._ld_books.mark_shut_down()
            return
        successor = self._ld_successor
        if successor is not None:
            torch_compat.shut_down(successor)
        was_shut = self._ld_books.is_shut_down()
        super().ld_shutdown_workers()
        if not was_shut and self._ld_books.is_shut_down(default=False):
            self._ld_events.drain()
            self._ld_cleanup()
            if self._ld_state is IterState.RUNNING:
                self._ld_state = IterState.CLOSED


__all__ = ["SupervisedPool", "start_method_of"]
