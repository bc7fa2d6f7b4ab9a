"""The supervision of one pool of workers: ``Supervisor``, a plain object, and ``SupervisedPool``,
the base of torch's and torchdata's supervised iterators (``iterator``, ``stateful``), which only
forwards their hooks to it.

The supervisor owns the pool's parts and calls them: the ``Ledger`` of batches owed; the
``WorkerWatch`` that finds a dead, stuck or mute worker (``wait``, ``poll() -> Evidence | None``);
``Recovery.handle(failure) -> Resumed | HandOver | Raise``, the one place that acts on a failure,
on what ``HealPolicy.decide`` says; the ``Pool`` of worker processes; torch's bookkeeping, through
``torch_compat.IteratorBooks`` alone; and the loader's ``Supervision`` (incidents, counts,
quarantine, back-off ladder).

A failure found inside torch's ``_next_data`` leaves it as a ``PoolFailure``; ``attempt`` hands it
to ``Recovery`` and turns the outcome into going on (a worker replaced alone), a successor
iterator (a rebuilt pool serves the rest of the epoch; torch's ``__init__`` never runs twice on
one object) or a raise. It holds the iterator only through the books, weakly: no reference
cycle, and the workers stop by refcount as torch's do.
"""

from __future__ import annotations

import contextlib
import functools
import os
import weakref
from collections.abc import Callable
from typing import Any

from loaderdoctor import boundary, torch_compat
from loaderdoctor.forensics import Diagnosis
from loaderdoctor.forensics.origin import origin_of
from loaderdoctor.recorder import Field, FlightRecorder
from loaderdoctor.supervise import live_quarantine
from loaderdoctor.supervise.detectors import DataError
from loaderdoctor.supervise.errors import HealingStoppedError, LoaderError
from loaderdoctor.supervise.parent import collect, repair
from loaderdoctor.supervise.parent.collect import EventReader
from loaderdoctor.supervise.parent.ledger import Ledger
from loaderdoctor.supervise.parent.pool import Pool
from loaderdoctor.supervise.parent.recovery import HandOver, Outcome, Raise, Recovery, Successor
from loaderdoctor.supervise.parent.repair import Move, PoolParts
from loaderdoctor.supervise.parent.single_process import internal_evidence
from loaderdoctor.supervise.parent.supervision import IterState, LoaderSnapshot, Supervision
from loaderdoctor.supervise.parent.watch import HalfMessage, PoolFailure, WorkerWatch
from loaderdoctor.supervise.parent.worker_exceptions import worker_exception
from loaderdoctor.supervise.streams import StreamBatch, StreamProgress, new_stream_progress
from loaderdoctor.supervise.worker.collate import SupervisedCollate
from loaderdoctor.supervise.worker.hooks import SupervisedWorkerInit
from loaderdoctor.supervise.worker.loader_view import wrap_dataset
from loaderdoctor.supervise.worker.sample_policy import HealedBatch, SkippedBatch

# What ``Supervisor.attempt`` returns for a step whose failure was handled (never a batch).
HANDLED = object()


class Supervisor:
    """The supervision of one iterator's pool of workers (its ``_ld_supervisor``)."""

    def __init__(
        self,
        iterator: Any,
        snapshot: LoaderSnapshot,
        supervision: Supervision,
        respawns: int,
        streams: StreamProgress | None,
        *,
        successor: Callable[[Successor], Any],
        probe: Callable[..., Any],  # ``probe.probe_batch`` on a pool class
        resume_point: Callable[[], Any] | None = None,
    ) -> None:
        self.state = IterState.RUNNING
        # (message, verdict) of the failure that stopped it; not the exception, whose traceback
        # would hold this iterator in a reference cycle
        self.failure: tuple[str, Diagnosis | None] = ("", None)
        self.successor: Any = None
        self.epoch = supervision.epoch
        self.last_index: Any = None
        self.raising: BaseException | None = None
        # torchdata replays the steps since its last snapshot when it resumes: those batches
        # were delivered before, and are not counted again
        self.replaying = False
        self.start_method = torch_compat.start_method_of(snapshot)
        self.log_dir = collect.make_log_dir()
        self.cleanup = weakref.finalize(self, collect.remove_log_dir, self.log_dir, os.getpid())
        # IterableDataset: where each worker's stream stands; a re-started pool resumes from it
        progress = streams if streams is not None else new_stream_progress(snapshot)
        self.resuming = streams is not None  # a successor: its workers resume their streams
        take = functools.partial(repair.take_event, supervision)
        recorder = FlightRecorder(snapshot.num_workers)
        for worker_id in range(snapshot.num_workers):
            recorder.reset_slot(worker_id)
        # (``snapshot``: the user's loader as it was, for successors and probes)
        self.parts = PoolParts(
            supervision,
            snapshot,
            torch_compat.IteratorBooks(iterator),
            Ledger(),
            recorder,
            EventReader(self.log_dir, take if progress is None else progress.take_events(take)),
            progress,
        )
        self.recovery = Recovery(
            self.parts,
            respawns=respawns,
            context=torch_compat.multiprocessing_context_of(snapshot),
            probe=probe,
            successor=successor,
            resume_point=resume_point,
        )
        self.repair = self.recovery.repair  # carries out what ``recovery`` plans

    # --- the start ------------------------------------------------------------------------------
    def view(self, snapshot: LoaderSnapshot) -> LoaderSnapshot:
        """The loader as the workers see it: the dataset, collate_fn and init wrapped."""
        supervision = self.parts.sup
        policy = supervision.sample_policy(snapshot.drop_last)
        dataset = wrap_dataset(snapshot.dataset, torch_compat.dataset_kind(snapshot), policy)
        self.repair.learns(dataset)
        collate = SupervisedCollate(snapshot.collate_fn, heal=policy is not None)
        streams = self.parts.streams
        return snapshot.with_overrides(
            dataset=dataset,
            collate_fn=collate,
            worker_init_fn=SupervisedWorkerInit(
                snapshot.worker_init_fn,
                self.parts.recorder,
                self.log_dir,
                snapshot.dataset,
                hang_timeout=supervision.settings.hang_timeout,
                oom_score_adj=supervision.oom_score_adj,
                sharing_strategy=supervision.worker_sharing_strategy,
                live_quarantine=live_quarantine.for_pool(supervision, self.parts.iterable),
                stream_resumes=(
                    streams.resumes(snapshot.num_workers)
                    if streams is not None and self.resuming
                    else None
                ),
                collate=collate,
            ),
        )

    def bootstrapping(self) -> contextlib.AbstractContextManager[None]:
        """While torch's (or torchdata's) ``__init__`` starts the workers: a spawned worker that
        re-runs the main script finds this pool's folder."""
        return boundary.bootstrap_dir(self.log_dir)

    def watching(self) -> WorkerWatch:
        """The watch on the pool, made once torch's ``__init__`` has started the workers (at
        once for torch's iterator; at the first wait for torchdata's, whose ``__init__`` waits
        for its workers' first state before it returns)."""
        if self.parts.watch is not None:
            return self.parts.watch
        # A dead worker must never make torch's SIGCHLD handler raise at a random line.
        self.parts.books.stop_sigchld_checks()
        snapshot = self.parts.snapshot
        pool = Pool(self.parts.books.processes(), self.log_dir)
        pool.first_for_oom_killer(self.parts.sup.oom_score_adj)
        self.parts.sup.workers_started(pool.pids(), pool.oom_notes)
        self.parts.watch = WorkerWatch(
            pool,
            self.parts.recorder,
            self.parts.ledger,
            dataset=snapshot.dataset,
            start_method=self.start_method,
            iterable=self.parts.iterable,
            hang_timeout=self.parts.sup.settings.hang_timeout,
            epoch=self.epoch,
            parts=(
                ("dataset", snapshot.dataset),
                ("collate_fn", snapshot.collate_fn),
                ("worker_init_fn", snapshot.worker_init_fn),
            ),
        )
        self.repair.watches(pool, self.parts.watch)
        return self.parts.watch

    # --- bookkeeping of what each batch holds -------------------------------------------------
    def sent(self, sent_before: int) -> None:
        """torch may have sent a task: owed (with the index drawn last) until delivered."""
        if self.parts.books.sent != sent_before:
            self.repair.owe(sent_before, self.last_index)

    def new_epoch(self) -> None:
        """torch's ``_reset`` of persistent workers starts another epoch on this pool."""
        self.epoch = self.parts.sup.epoch
        if self.parts.watch is not None:
            self.parts.watch.epoch = self.epoch
        repair = self.repair
        streams = self.parts.streams
        repair.new_epoch(None if streams is None else new_stream_progress(self.parts.snapshot))

    def reset_persistent(self, reset: Callable[[], None]) -> None:
        """torch's ``_reset`` of persistent workers for another epoch (``reset``), supervised.

        A worker that died while the pool sat idle between epochs is replaced first, alone:
        torch's reset counts one resume reply per worker, and a dead one never sends its reply.
        A worker that dies while the reset waits for those replies leaves torch's reset half
        done (no index sent yet): the pool is then stopped and a successor serves the whole
        epoch, never an iterator that would end the epoch at once with nothing delivered.
        """
        idle = self.watching()
        self.parts.books.start_sampler_pass()  # a successor built here serves this epoch's pass
        for worker_id in range(len(idle.pool)):
            if self.state is not IterState.RUNNING:
                return
            if not idle.pool.is_alive(worker_id):
                death = idle.death(worker_id, {})
                self.attempt(functools.partial(_raise, PoolFailure(death)))
        if self.state is not IterState.RUNNING:
            return
        with self.repair.resetting():
            self.attempt(reset)

    # --- waiting for data, watching the workers -------------------------------------------
    def wait(self, timeout: float) -> Any:
        """torch's ``_try_get_data``, watched."""
        try:
            return self.watching().wait(self.parts.books, timeout)
        except HalfMessage as stalled:
            half = stalled.evidence
        self.repair.result_queue_unreadable()
        raise PoolFailure(half)

    def get(self, timeout: float) -> Any:
        """torch's ``_get_data`` with the user's ``timeout``: a batch, or the timeout's failure."""
        success, data = self.wait(timeout)
        if success:
            return data
        books = self.parts.books
        raise PoolFailure(self.watching().timed_out(books.task_in_turn, books.task_info, timeout))

    def received(self, data: Any, worker_id: int, put_index: Callable[[], None]) -> Any:
        """A batch torch is about to hand over: counted, unwrapped, or its worker's exception
        raised (for healing, a ``PoolFailure`` when the batch is still owed)."""
        task, indices = self.parts.ledger.settle_handed_over(self.parts.books.task_info)
        sup = self.parts.sup
        self.parts.events.drain_if_new(self.parts.recorder.total(Field.EVENTS))
        if torch_compat.is_exception_wrapper(data):
            self.parts.books.task_done(worker_id)
            put_index()
            ev = self.watching().base("exception", worker_id)
            ev.batch = task
            error, diagnosis = worker_exception(data, ev, indices, self.parts.snapshot.dataset)
            failure = PoolFailure(ev, error, diagnosis)
            error = None  # type: ignore[assignment]  # the failure holds it
            try:
                if task is None:  # not tracked: nothing to load again
                    outcome: Outcome = self.recovery.give_up(failure)
                else:
                    failure.plan = self.recovery.plan(failure, received=True)
                    if failure.plan.move is not Move.RAISE:
                        self.parts.ledger.owe(task, indices)  # still owed to the user
                        raise failure
                    outcome = self.repair.carry(failure.plan)
                    failure.plan = None  # it names the failure: no cycle
                assert isinstance(outcome, Raise) and outcome.error is not None
                self.raising, outcome.error = outcome.error, None  # the user's, not ours
                raise self.raising
            finally:
                failure = None  # type: ignore[assignment]  # no cycle via its traceback
        if self.replaying:  # delivered before the state this pool resumed from
            if isinstance(data, StreamBatch) and self.parts.streams is not None:
                self.parts.streams.replayed(data)  # torchdata re-read it: is it the same?
            return data.batch if isinstance(data, HealedBatch) else data
        if isinstance(data, StreamBatch):
            return self.stream_delivered(data, indices, counted=task is not None)
        if isinstance(data, SkippedBatch):
            if task is not None:
                repair.take_events(sup, data.events)
        elif task is not None:
            data = repair.delivered_batch(sup, indices, data)
            if sup.backoff is not None:
                sup.backoff.delivered()
        elif isinstance(data, HealedBatch):
            data = data.batch
        return data

    # --- the decision point ---------------------------------------------------------------
    def next_data(self, step: Callable[[], Any]) -> Any:
        """torch's ``_next_data`` (``step``), supervised: the next batch for the user."""
        while True:
            if self.state is IterState.FAILED:
                message, diagnosis = self.failure
                raise LoaderError(
                    f"this DataLoader iterator stopped after an earlier failure: {message}",
                    diagnosis,
                )
            if self.state is IterState.HANDED_OVER:
                data = self.from_successor()
            else:
                try:
                    data = self.attempt(step)
                except StopIteration:
                    self.epoch_done()
                    raise
                if data is HANDLED:
                    continue
                if self.parts.sup.backoff is not None:
                    self.carry_out(self.repair.climb())
            if isinstance(data, SkippedBatch):
                continue
            return data

    def attempt(
        self,
        step: Callable[[], Any],
        *,
        building: bool = False,
        restart: Callable[[], Any] | None = None,
    ) -> Any:
        """Run a step of the library's own code that may meet a failed worker (a ``PoolFailure``
        out of the watch, or an exception of loaderdoctor's own code): its value, or
        ``HANDLED`` once ``Recovery`` has dealt with the failure and the pool goes on (or hands
        over); a failure that is the user's answer is raised from here. The one place a pool
        failure is caught. ``building``: inside the iterator's ``__init__`` (or a persistent pool's
        reset for a new epoch), before a batch was delivered: there is nothing to resume from
        yet; ``restart`` says where a new pool starts over (a resume point: the state this one
        was given, the sampler tail and streams it went on with), None where none can."""
        failure: PoolFailure | None = None
        try:
            return step()
        except PoolFailure as caught:
            failure = caught
        except StopIteration:
            raise
        except Exception as error:  # broad on purpose: ours become internal-error
            deliberate = error is self.raising or isinstance(
                error, (HealingStoppedError, DataError)
            )
            self.raising = None  # holding it would be a cycle through its frames
            if deliberate or origin_of(error) is None:
                raise  # the user's (or torch's) exception, with its verdict
            failure = PoolFailure(internal_evidence(error, self.epoch), error)
        try:
            recovery = self.recovery
            if not building:
                outcome = recovery.handle(failure)
            elif restart is None:
                outcome = recovery.give_up(failure)
            else:
                outcome = recovery.restart(failure, restart)
            self.carry_out(outcome)
        finally:
            # An exception kept in a local of this frame holds the frame (and so this
            # iterator) in a reference cycle through its traceback.
            failure = None
        return HANDLED

    def carry_out(self, outcome: Outcome | None) -> None:
        """Go on (``Resumed``, None), serve from a successor, or raise."""
        if isinstance(outcome, HandOver):
            self.hand_over(outcome.successor)
        elif isinstance(outcome, Raise):
            error, outcome.error = outcome.error, None
            if outcome.failure is not None:
                self.failure = outcome.failure
                self.state = IterState.FAILED
            assert error is not None
            try:
                raise error
            finally:
                error = None  # a raised exception kept in a local is a cycle through its frame

    def hand_over(self, successor: Any) -> None:
        """From now on ``successor`` serves this iterator's batches."""
        self.successor = successor
        self.state = IterState.HANDED_OVER

    def from_successor(self) -> Any:
        successor = self.successor
        try:
            data = torch_compat.next_data(successor)
        except StopIteration:
            self.epoch_done()
            raise
        finally:
            # A successor that handed over in turn: follow the chain to the live one.
            # (detached first: a dropped iterator shuts its successor down with it).
            while (
                inner := supervisor_of(successor)
            ) is not None and inner.state is IterState.HANDED_OVER:
                inner.successor, successor = None, inner.successor
            self.successor = successor
        return data

    def epoch_done(self) -> None:
        self.parts.events.drain()
        self.parts.sup.epoch_finished()

    # --- streams (IterableDataset): positions delivered, culprits skipped ---------------------
    def stream_delivered(self, batch: StreamBatch, indices: Any, counted: bool) -> Any:
        """Unwrap a stream worker's batch; its positions advance that worker's stream."""
        streams = self.parts.streams
        if streams is None:  # a StreamBatch reaches only the iterator of a stream
            return batch.batch
        streams.delivered(batch)
        if counted:
            repair.take_events(self.parts.sup, batch.events)
            # counted by what it holds: a stream that batches itself yields whole batches
            self.parts.sup.delivered(indices, batch.batch)
            if self.parts.sup.backoff is not None:
                self.parts.sup.backoff.delivered()
        streams.say_notes()
        repair.follow_up(self.parts.sup, streams.take_learnt())
        return batch.batch

    def stream_ended(self, worker_id: int) -> None:
        if self.parts.streams is not None:
            self.parts.streams.ended(worker_id)  # its stream ended: a re-started one stays ended

    # --- the end ----------------------------------------------------------------------------
    def drain(self) -> None:
        """Read the events written so far (``loader.report`` asks, mid-epoch)."""
        if self.state is IterState.RUNNING and not self.parts.books.is_shut_down():
            self.parts.events.drain()
        inner = supervisor_of(self.successor)
        if inner is not None:
            inner.drain()

    def shut_down(
        self, books: torch_compat.IteratorBooks, torch_shutdown: Callable[[], None]
    ) -> None:
        """torch's ``_shutdown_workers`` (``torch_shutdown``), and this pool's successor and
        files with it. ``books``: made afresh by the iterator, whose ``__del__`` may be the
        caller: the garbage collector clears weak references to an object before it finalizes
        it, this supervisor's among them."""
        pool = self.repair.pool
        if pool is not None and not pool.owned_here():
            # A forked child inherited this iterator: its workers are not this process's
            # children, so there is nothing to stop (and torch's join would raise here).
            books.mark_shut_down()
            return
        if self.successor is not None:
            torch_compat.shut_down(self.successor)
        was_shut = books.is_shut_down()
        torch_shutdown()
        if not was_shut and books.is_shut_down(default=False):
            self.parts.events.drain()
            self.cleanup()
            if self.state is IterState.RUNNING:
                self.state = IterState.CLOSED
            self.parts.sup.tell_watchers("stopped")  # a loop left early: its counts saved now


def _raise(failure: PoolFailure) -> None:
    raise failure


def supervisor_of(iterator: Any) -> Supervisor | None:
    """The supervisor of a supervised multiprocessing iterator; None for any other."""
    return iterator._ld_supervisor if isinstance(iterator, SupervisedPool) else None


class SupervisedPool(torch_compat.MultiProcessingHooks):
    """The base of torch's and torchdata's supervised multiprocessing iterators: their hooks,
    forwarded to the pool's ``Supervisor``. Each adapter builds the supervisor before its
    library's ``__init__`` starts the workers, and translates the two hooks whose parameters
    differ (``_reset``, ``_process_data``)."""

    # A class default: torch's __del__ shuts a pool down even when its __init__ failed early
    _ld_supervisor: Supervisor | None = None

    @property
    def _ld(self) -> Supervisor:
        supervisor = self._ld_supervisor
        assert supervisor is not None  # built first thing in the adapter's __init__
        return supervisor

    def ld_next_index(self) -> Any:
        index = super().ld_next_index()
        self._ld.last_index = index
        return index

    def ld_try_put_index(self) -> None:
        supervisor = self._ld
        sent = supervisor.parts.books.sent
        super().ld_try_put_index()
        supervisor.sent(sent)

    def ld_try_get_data(self, timeout: float = torch_compat.MP_STATUS_CHECK_INTERVAL) -> Any:
        return self._ld.wait(timeout)

    def ld_get_data(self) -> Any:
        timeout = self._ld.parts.books.timeout
        if timeout > 0:
            return self._ld.get(timeout)
        return super().ld_get_data()

    def ld_next_data(self) -> Any:
        return self._ld.next_data(super().ld_next_data)

    def _ld_received(self, data: Any, worker_id: int) -> Any:
        """A batch torch is about to process (the adapters' ``_process_data``)."""
        return self._ld.received(data, worker_id, self.ld_try_put_index)

    def ld_mark_worker_as_unavailable(self, worker_id: int, shutdown: bool = False) -> None:
        if not shutdown:
            self._ld.stream_ended(worker_id)
        super().ld_mark_worker_as_unavailable(worker_id, shutdown)

    def ld_shutdown_workers(self) -> None:
        # At exit Python may have emptied this module's globals, or torch_compat's, before a
        # loader kept in a global is collected (persistent workers, torchdata's iterator): then
        # torch_compat, or its function, is None
        exiting = None if torch_compat is None else torch_compat.interpreter_exiting
        if exiting is None or exiting():
            return  # torch's own exit handlers stop the workers
        supervisor = self._ld_supervisor
        if supervisor is None:
            super().ld_shutdown_workers()
            return
        supervisor.shut_down(torch_compat.IteratorBooks(self), super().ld_shutdown_workers)


__all__ = ["HANDLED", "SupervisedPool", "Supervisor", "supervisor_of"]
