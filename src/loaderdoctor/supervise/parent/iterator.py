"""The supervised multiprocessing iterator: torch's own iterator with a watch on every worker.

A clean run takes exactly torch's code path (same sampler draws, same seeds, same batches). The
class is thin: it overrides the torch hooks it must and delegates to named parts:

* ``Ledger``: the batches handed to workers and not yet delivered (``ledger``);
* ``WorkerWatch.poll() -> Evidence | None``: a dead, stuck or mute worker (``worker_watch``);
* ``Recovery.handle(failure) -> Resumed | HandOver | Raise``: what is done about it, the one place
  that acts on a failure (``recovery``), on what ``HealPolicy.decide`` says (``heal_policy``);
* ``Pool``: the worker processes, their liveness and a fast stop (``pool``);
* ``Supervision``: what the loader and its iterators share: the append-only ``IncidentLog``, the
  counts, the quarantine, the back-off ladder (``supervision``).

Its state is an ``IterState``. A failure found inside torch's ``_next_data`` leaves it as a
``PoolFailure``; ``_next_data`` hands it to ``Recovery`` and turns the outcome into going on
(a worker replaced alone), a successor iterator (a rebuilt pool serves the rest of the epoch;
torch's ``__init__`` never runs twice on one object) or a raise.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import warnings
import weakref
from typing import Any

import torch

from loaderdoctor import torch_compat
from loaderdoctor.forensics import Diagnosis
from loaderdoctor.forensics.origin import origin_of
from loaderdoctor.recorder import Field, FlightRecorder
from loaderdoctor.supervise import live_quarantine
from loaderdoctor.supervise.errors import HealingStoppedError, LoaderError
from loaderdoctor.supervise.files import BOOTSTRAP_DIR_ENV
from loaderdoctor.supervise.heal import HealWarning, user_stacklevel
from loaderdoctor.supervise.heal_policy import owed_again
from loaderdoctor.supervise.parent import collect
from loaderdoctor.supervise.parent.events import EventReader
from loaderdoctor.supervise.parent.ledger import Ledger
from loaderdoctor.supervise.parent.pool import Pool
from loaderdoctor.supervise.parent.recovery import (
    HandOver,
    Outcome,
    Phase,
    PoolFailure,
    Raise,
    Recovery,
    Successor,
)
from loaderdoctor.supervise.parent.result_queue import HalfMessage
from loaderdoctor.supervise.parent.single_process import (
    SupervisedSingleProcessIter,
    internal_evidence,
)
from loaderdoctor.supervise.parent.start_failure import (
    fallback_overrides,
    loads_in_process,
    start_diagnosis,
    start_error,
)
from loaderdoctor.supervise.parent.supervision import (
    IterState,
    LoaderSnapshot,
    Settings,
    Supervision,
)
from loaderdoctor.supervise.parent.watch import POLL_S, WorkerWatch
from loaderdoctor.supervise.parent.worker_exceptions import worker_exception
from loaderdoctor.supervise.streams import StreamBatch, StreamProgress, new_stream_progress
from loaderdoctor.supervise.worker.collate import SupervisedCollate
from loaderdoctor.supervise.worker.hooks import SupervisedWorkerInit
from loaderdoctor.supervise.worker.loader_view import wrap_dataset
from loaderdoctor.supervise.worker.sample_policy import HealedBatch, SkippedBatch
from loaderdoctor.system.oom_priority import PROBE_OOM_SCORE_ADJ

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 60.0


def start_method_of(loader: Any) -> str:
    context = loader.multiprocessing_context or multiprocessing
    method = context.get_start_method(allow_none=True)
    return method or multiprocessing.get_all_start_methods()[0]


def _remove_log_dir(path: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # never from a forked child that inherited the finalizer
        shutil.rmtree(path, ignore_errors=True)


class PoolLifetime(torch_compat.MultiProcessingHooks):
    """The life of a supervised pool's iterator, torch's and torchdata's alike: the folder its
    workers write in, the events read before a report, and the end of its workers."""

    _ld_state: IterState
    _ld_successor: Any
    _ld_events: EventReader
    _ld_log_dir: str
    _ld_cleanup: weakref.finalize[Any, Any]

    def _ld_make_log_dir(self) -> None:
        """The workers' folder, removed with this iterator (by the process that made it)."""
        self._ld_log_dir = collect.make_log_dir()
        self._ld_cleanup = weakref.finalize(self, _remove_log_dir, self._ld_log_dir, os.getpid())

    def _ld_drain(self) -> None:
        """Read the events written so far (``loader.report`` asks, mid-epoch)."""
        if self._ld_state is IterState.RUNNING and not self.ld_is_shut_down():
            self._ld_events.drain()
        successor = self._ld_successor
        if isinstance(successor, PoolLifetime):
            successor._ld_drain()

    def ld_shutdown_workers(self) -> None:
        # At exit Python may have emptied this module's globals before a loader kept in a
        # global is collected (persistent workers, torchdata's iterator): torch_compat is None
        if torch_compat is None or torch_compat.interpreter_exiting():
            return  # torch's own exit handlers stop the workers
        pool = getattr(self, "_ld_pool", None)
        if pool is not None and not pool.owned_here():
            # A forked child inherited this iterator: its workers are not this process's
            # children, so there is nothing to stop (and torch's join would raise here).
            self.ld_mark_shut_down()
            return
        successor = getattr(self, "_ld_successor", None)
        if successor is not None:
            torch_compat.shut_down(successor)
        was_shut = self.ld_is_shut_down()
        super().ld_shutdown_workers()
        if not was_shut and self.ld_is_shut_down(default=False):
            self._ld_events.drain()
            self._ld_cleanup()
            if self._ld_state is IterState.RUNNING:
                self._ld_state = IterState.CLOSED


class SupervisedMultiProcessingIter(PoolLifetime, torch_compat.HookedMultiProcessingIter):
    def __init__(
        self,
        snapshot: LoaderSnapshot,
        supervision: Supervision,
        respawns: int = 0,
        streams: StreamProgress | None = None,
    ):
        self._ld_init_state(snapshot, supervision, respawns, streams)
        if self._ld_start(self._ld_view(snapshot)):
            self._ld_watch_pool()

    def _ld_init_state(
        self,
        snapshot: LoaderSnapshot,
        supervision: Supervision,
        respawns: int,
        streams: StreamProgress | None,
    ) -> None:
        self._ld_sup = supervision
        self._ld_snapshot = snapshot  # the user's loader as it was, for successors and probes
        self._ld_state = IterState.RUNNING
        # (message, verdict) of the failure that stopped it; not the exception, whose traceback
        # would hold this iterator in a reference cycle
        self._ld_failure: tuple[str, Diagnosis | None] = ("", None)
        self._ld_successor: Any = None
        self._ld_epoch = supervision.epoch
        self._ld_ledger = Ledger()
        self._ld_last_index: Any = None
        self._ld_raising: BaseException | None = None
        self._ld_start_method = start_method_of(snapshot)
        self._ld_context = torch_compat.multiprocessing_context_of(snapshot)
        self._ld_iterable = torch_compat.is_iterable(snapshot)
        self._ld_make_log_dir()
        # IterableDataset: where each worker's stream stands; a re-started pool resumes from it
        progress = streams if streams is not None else new_stream_progress(snapshot)
        self._ld_resuming = streams is not None  # a successor: its workers resume their streams
        self._ld_events = EventReader(
            self._ld_log_dir,
            supervision.take_event
            if progress is None
            else progress.take_events(supervision.take_event),
        )
        generator = snapshot.generator if snapshot.generator is not None else None
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
            probe=probe_batch,
            successor=successor_of,
            # Replayed by a successor so that its pool draws the same base seed as this one
            # without consuming the user's generator (which would shift every later epoch).
            generator_state=(generator or torch.default_generator).get_state(),
        )

    @property
    def _ld_streams(self) -> StreamProgress | None:
        """IterableDataset: where each worker's stream stands; a re-started pool resumes from it."""
        return self._ld_recovery.streams

    def _ld_view(self, snapshot: LoaderSnapshot) -> LoaderSnapshot:
        """The loader as the workers see it: the dataset, collate_fn and init wrapped."""
        supervision = self._ld_sup
        policy = supervision.sample_policy(snapshot.drop_last)
        # With on_error="replace" only a worker finds a quarantined sample's substitute, so such
        # a sample cannot simply be left out in the main process (see ``_next_index``).
        self._ld_recovery.replacing = policy is not None and policy.on_error == "replace"
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

    def _ld_start(self, view: LoaderSnapshot) -> bool:
        """torch's own __init__ starts the workers; False when they could not start."""
        previous = os.environ.get(BOOTSTRAP_DIR_ENV)
        os.environ[BOOTSTRAP_DIR_ENV] = self._ld_log_dir
        try:
            super().__init__(view)
        except Exception as error:
            self._ld_start_failed(error)
            return False
        finally:
            if previous is None:
                os.environ.pop(BOOTSTRAP_DIR_ENV, None)
            else:
                os.environ[BOOTSTRAP_DIR_ENV] = previous
        # At once: torch's __init__ has already sent the first indices, and a worker that dies
        # while its pid is still registered makes torch's SIGCHLD handler raise at whatever line
        # runs then (seen: inside another iterator's __del__, "Exception ignored in").
        torch_compat.stop_sigchld_checks(self)
        return True

    def _ld_watch_pool(self) -> None:
        snapshot = self._ld_snapshot
        self._ld_pool = Pool(*self.ld_processes(), self._ld_log_dir)
        self._ld_pool.first_for_oom_killer(self._ld_sup.oom_score_adj)
        self._ld_sup.oom_notes.extend(self._ld_pool.oom_notes)
        self._ld_sup.worker_pids |= self._ld_pool.pids()
        self._ld_recovery.pool = self._ld_pool
        self._ld_watch = WorkerWatch(
            self._ld_pool,
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

    # --- start-up failure -------------------------------------------------------------------
    def _ld_start_failed(self, error: Exception) -> None:
        torch_compat.stop_sigchld_checks(self)  # workers torch registered before it failed
        Pool(self.ld_started_workers(), [], None, self._ld_log_dir).kill_all()
        self.ld_mark_shut_down()
        self._ld_cleanup()
        sup = self._ld_sup
        diagnosis = start_diagnosis(error, self._ld_snapshot, self._ld_start_method)
        if not loads_in_process(sup, diagnosis, self._ld_start_method):
            sup.record(diagnosis, "raised")
            try:
                raise start_error(error, diagnosis)
            finally:
                error = None  # type: ignore[assignment]  # no cycle through the traceback
        forked = fallback_overrides(sup)
        self._ld_successor = (
            SupervisedMultiProcessingIter(self._ld_snapshot.with_overrides(**forked), sup)
            if forked
            else SupervisedSingleProcessIter(
                self._ld_snapshot.with_overrides(num_workers=0, timeout=0, prefetch_factor=None),
                sup,
            )
        )
        self._ld_state = IterState.HANDED_OVER

    # --- bookkeeping of what each batch holds -------------------------------------------------
    def ld_next_index(self) -> Any:
        next_index = super().ld_next_index
        index = self._ld_recovery.leave_out_new_quarantine(next_index(), next_index)
        self._ld_last_index = index
        return index

    def ld_try_put_index(self) -> None:
        sent = self.ld_sent
        super().ld_try_put_index()
        if self.ld_sent != sent:
            recovery = self._ld_recovery
            self._ld_ledger.owe(sent, self._ld_last_index, recovery.pending_skips)
            recovery.pending_skips = 0

    def ld_reset(self, loader: Any, first_iter: bool = False) -> None:
        if not first_iter:
            self._ld_epoch = self._ld_watch.epoch = self._ld_sup.epoch
            recovery = self._ld_recovery
            streams = recovery.streams
            recovery.new_epoch(None if streams is None else new_stream_progress(self._ld_snapshot))
            failure: PoolFailure | None = None
            recovery.phase = Phase.RESETTING
            try:
                super().ld_reset(loader, first_iter)
            except PoolFailure as caught:  # a persistent worker died between epochs
                failure = caught
            finally:
                recovery.phase = Phase.RUNNING
            if failure is not None:
                try:
                    self._ld_carry_out(recovery.handle(failure))
                finally:
                    failure = None  # no reference cycle through its traceback
            return
        # torch registered the new workers' pids for its SIGCHLD handler just before this first
        # reset, which sends their first indices: a worker killed meanwhile (load is normal)
        # must reach WorkerWatch as a death, not raise out of torch's __init__ as a start failure.
        torch_compat.stop_sigchld_checks(self)
        super().ld_reset(loader, first_iter)

    # --- waiting for data, watching the workers -------------------------------------------
    def ld_try_get_data(self, timeout: float = torch_compat.MP_STATUS_CHECK_INTERVAL) -> Any:
        try:
            return self._ld_watch.wait(self, self._ld_books, timeout)
        except HalfMessage as stalled:
            half = stalled.evidence
        self._ld_recovery.queue_poisoned = True  # never read again: the pool is rebuilt
        raise PoolFailure(half)

    def ld_get_data(self) -> Any:
        timeout = self.ld_timeout
        if timeout > 0:
            success, data = self.ld_try_get_data(timeout)
            if success:
                return data
            books = self._ld_books
            raise PoolFailure(
                self._ld_watch.timed_out(self.ld_task_in_turn, books.task_info, timeout)
            )
        return super().ld_get_data()

    def ld_process_data(self, data: Any, worker_idx: int) -> Any:
        task, indices, skipped = self._ld_ledger.settle_handed_over(self._ld_books.task_info)
        self._ld_sup.counts.skipped += skipped
        self._ld_events.drain_if_new(self._ld_recorder.total(Field.EVENTS))
        if torch_compat.is_exception_wrapper(data):
            self.ld_task_done(worker_idx)
            self.ld_try_put_index()
            ev = self._ld_watch.base("exception", worker_idx)
            ev.batch = task
            error, diagnosis = worker_exception(data, ev, indices, self._ld_snapshot.dataset)
            healable = owed_again(diagnosis)
            try:
                if self._ld_sup.settings.heal and healable and task is not None:
                    self._ld_sup.counts.skipped -= skipped
                    self._ld_ledger.owe(task, indices, skipped)  # still owed to the user
                    raise PoolFailure(ev, error, diagnosis)
                self._ld_sup.record(diagnosis, "raised")
                self._ld_raising = error  # raised on purpose: the user's, not an internal error
                raise error
            finally:
                error = None  # type: ignore[assignment]  # no cycle via its traceback
        if isinstance(data, StreamBatch):
            data = self._ld_stream_delivered(data, indices, counted=task is not None)
        elif isinstance(data, SkippedBatch):
            if task is not None:
                self._ld_sup.take_events(data.events)
        elif task is not None:
            data = self._ld_sup.delivered_batch(indices, data)
            if self._ld_sup.backoff is not None:
                self._ld_sup.backoff.delivered()
        elif isinstance(data, HealedBatch):
            data = data.batch
        return super().ld_process_data(data, worker_idx)

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
                failure: PoolFailure | None = None
                internal: BaseException | None = None
                try:
                    data = super().ld_next_data()
                except PoolFailure as caught:
                    failure = caught
                except StopIteration:
                    self._ld_epoch_done()
                    raise
                except Exception as error:
                    deliberate = error is self._ld_raising or isinstance(error, HealingStoppedError)
                    self._ld_raising = None  # holding it would be a cycle through its frames
                    if deliberate or origin_of(error) is None:
                        raise  # the user's (or torch's) exception, with its verdict
                    internal = error
                if internal is not None:
                    failure = PoolFailure(internal_evidence(internal, self._ld_epoch), internal)
                if failure is not None:
                    try:
                        self._ld_carry_out(self._ld_recovery.handle(failure))
                    finally:
                        # An exception kept in a local of this frame holds the frame (and so
                        # this iterator) in a reference cycle through its traceback.
                        failure = internal = None
                    continue
                if self._ld_sup.backoff is not None:
                    self._ld_carry_out(self._ld_recovery.climb())
            if isinstance(data, SkippedBatch):
                continue
            return data

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
            while getattr(successor, "_ld_state", None) is IterState.HANDED_OVER:
                successor._ld_successor, successor = None, successor._ld_successor
            self._ld_successor = successor
        return data

    def _ld_epoch_done(self) -> None:
        self._ld_recovery.count_pending_skips()  # the epoch's last batches
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


def successor_of(plan: Successor) -> Any:
    """The iterator that serves a stopped pool's owed batches and the rest of the epoch."""
    snapshot, num_workers = plan.snapshot, plan.snapshot.num_workers
    if plan.plain:
        if num_workers:
            return torch_compat.MultiProcessingIter(snapshot)
        return torch_compat.SingleProcessIter(snapshot)
    if num_workers == 0:
        return SupervisedSingleProcessIter(snapshot, plan.supervision)
    return SupervisedMultiProcessingIter(
        snapshot, plan.supervision, respawns=plan.respawns, streams=plan.streams
    )


def probe_batch(snapshot: LoaderSnapshot, indices: list[Any]) -> Any:
    """Load ``indices`` one by one, alone, in a fresh worker: the first one that fails again
    (None when all load).

    A string says why the probe itself could not tell (its worker could not start, or
    loaderdoctor's own machinery failed): logged, and never taken for the sample's failure,
    which would quarantine a healthy sample.
    """
    loader = torch.utils.data.DataLoader(
        snapshot.dataset,
        batch_size=None,  # each sample by ``dataset[index]``, so the recorder names it
        sampler=indices,
        num_workers=1,
        worker_init_fn=snapshot.worker_init_fn,
        multiprocessing_context=snapshot.multiprocessing_context,
    )
    settings = Settings(
        hang_timeout=probe_timeout(snapshot),
        heal=False,
        on_error="raise",
        retries=0,
        quarantine_path=None,
        allow_in_process=False,
    )
    supervision = Supervision(settings, snapshot.dataset, lambda: None)
    supervision.log.quiet = True  # an isolated re-try: the loader it serves reports the outcome
    # The memory suspect goes first, before the workers and never after the training process.
    supervision.oom_score_adj = PROBE_OOM_SCORE_ADJ
    try:
        for _ in SupervisedMultiProcessingIter(LoaderSnapshot(loader), supervision):
            pass
    except Exception as error:
        for incident in supervision.log:
            found = [i for i in indices if _fails_at(incident.diagnosis, i)]
            if found:
                return found[0]
        what = f"sample {indices[0]!r}" if len(indices) == 1 else f"samples {indices!r}"
        logger.warning("loaderdoctor: %s could not be re-tried alone", what, exc_info=True)
        return f"{type(error).__name__}: {error}"
    return None


def probe_timeout(snapshot: LoaderSnapshot) -> float:
    """How long a re-try alone may stay on one sample: the loader's own hang_timeout where it
    is shorter (longer, the sample would hang the loader too)."""
    loader_timeout = snapshot.__dict__.get("hang_timeout")
    return min(loader_timeout or PROBE_TIMEOUT_S, PROBE_TIMEOUT_S)


def _fails_at(diagnosis: Diagnosis, index: Any) -> bool:
    """The diagnosis is of the sample ``index`` failing (not of a worker that never reached it,
    nor of loaderdoctor's own machinery)."""
    if diagnosis.cause == "internal-error":
        return False
    try:
        return index in diagnosis.indices
    except (TypeError, ValueError):  # an index that does not compare (an array)
        return False


__all__ = [
    "POLL_S",
    "PoolLifetime",
    "SupervisedMultiProcessingIter",
    "probe_batch",
    "start_method_of",
    "successor_of",
]
