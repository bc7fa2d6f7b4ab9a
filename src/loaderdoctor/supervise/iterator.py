"""The supervised multiprocessing iterator: torch's own iterator with a watch on every worker.

A clean run takes exactly torch's code path (same sampler draws, same seeds, same batches). The
class is thin: it overrides the torch hooks it must and delegates to named parts:

* ``Ledger``: the batches handed to workers and not yet delivered (``ledger``);
* ``WorkerWatch.poll() -> Evidence | None``: a dead, stuck or mute worker (``worker_watch``);
* ``HealPolicy.decide(diagnosis, situation) -> Action``: what to do about it, pure (``heal_policy``);
* ``Pool``: the worker processes, their liveness and a fast stop (``pool``);
* ``Supervision``: what the loader and its iterators share: the append-only ``IncidentLog``, the
  counts, the quarantine, the back-off ladder (``supervision``).

Its state is an ``IterState``. A dead or hung worker of a map-style pool is replaced alone
(``_ld_replace``: a new process with its ``worker_id``, started as torch starts one, with the
batches it owed re-sent); the other workers run on. A pool of another shape (a back-off), a stream,
or a result queue left locked by a worker killed mid-write gets a rebuilt pool instead: a new
iterator (a successor) that serves the rest of the epoch; torch's ``__init__`` never runs twice on
one object.
"""

from __future__ import annotations

import copy
import logging
import multiprocessing
import os
import queue
import shutil
import time
import warnings
import weakref
from dataclasses import replace
from typing import Any, NoReturn

import torch

from loaderdoctor import torch_compat
from loaderdoctor.forensics import Diagnosis, Evidence, diagnose
from loaderdoctor.forensics.origin import origin_of
from loaderdoctor.forensics.reproduced import reproduced_alone
from loaderdoctor.forensics.verdict_text import format_death_headline, format_verdict
from loaderdoctor.recorder import Field, FlightRecorder
from loaderdoctor.supervise import collect, live_quarantine, respawn, result_queue
from loaderdoctor.supervise.errors import LoaderError, WorkerDiedError, WorkerHangError, attach
from loaderdoctor.supervise.events import EventReader
from loaderdoctor.supervise.heal import HealWarning, ResumeSampler, length_of, user_stacklevel
from loaderdoctor.supervise.heal_policy import (
    ENVIRONMENTAL,
    Action,
    ActionKind,
    HealPolicy,
    Situation,
    memory_suspect,
    replaces_one_worker,
)
from loaderdoctor.supervise.ledger import Ledger
from loaderdoctor.supervise.loader_view import wrap_dataset
from loaderdoctor.supervise.pool import Pool
from loaderdoctor.supervise.respawn import Replacement
from loaderdoctor.supervise.result_queue import HalfMessage
from loaderdoctor.supervise.sample_policy import HealedBatch, SkippedBatch
from loaderdoctor.supervise.samples import sample_file
from loaderdoctor.supervise.single_process import SupervisedSingleProcessIter, internal_evidence
from loaderdoctor.supervise.start_failure import load_in_process, start_diagnosis, start_error
from loaderdoctor.supervise.streams import StreamBatch, StreamProgress, new_stream_progress
from loaderdoctor.supervise.supervision import IterState, LoaderSnapshot, Settings, Supervision
from loaderdoctor.supervise.worker import SupervisedBatchedMapDataset
from loaderdoctor.supervise.worker_collate import SupervisedCollate
from loaderdoctor.supervise.worker_exceptions import worker_exception
from loaderdoctor.supervise.worker_hooks import BOOTSTRAP_DIR_ENV, SupervisedWorkerInit
from loaderdoctor.supervise.worker_watch import WorkerWatch
from loaderdoctor.system.oom_priority import PROBE_OOM_SCORE_ADJ

logger = logging.getLogger(__name__)

# How often the main process looks at its workers while it waits for a batch. torch checks every
# MP_STATUS_CHECK_INTERVAL (5 s) and relies on a SIGCHLD handler for the rest.
POLL_S = 0.1
PROBE_TIMEOUT_S = 60.0
POLICY = HealPolicy()


def start_method_of(loader: Any) -> str:
    context = loader.multiprocessing_context or multiprocessing
    method = context.get_start_method(allow_none=True)
    return method or multiprocessing.get_all_start_methods()[0]


class _PoolFailure(Exception):
    """Internal: a worker failed. Carries the evidence out of torch's ``_next_data`` loop to
    ``SupervisedMultiProcessingIter._next_data``, where the policy decides."""

    def __init__(
        self,
        evidence: Evidence,
        error: BaseException | None = None,
        diagnosis: Diagnosis | None = None,
    ) -> None:
        super().__init__(evidence.kind)
        self.evidence = evidence
        self.error = error  # the worker's own exception, rebuilt (kind == "exception")
        self.diagnosis = diagnosis


def _remove_log_dir(path: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # never from a forked child that inherited the finalizer
        shutil.rmtree(path, ignore_errors=True)


class SupervisedMultiProcessingIter(torch_compat.MultiProcessingIter):
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
        self._ld_respawns = respawns
        self._ld_epoch = supervision.epoch
        self._ld_ledger = Ledger()
        self._ld_last_index: Any = None
        self._ld_pending_skips = 0  # left out of batches not sent yet (``_next_index``)
        self._ld_raising: BaseException | None = None
        self._ld_in_reset = False  # torch's _reset is waiting for its workers' resume replies
        self._ld_queue_poisoned = False  # a worker died mid-write: the result queue is unusable
        # The quarantine every worker of this pool knows (it only grows, in insertion order).
        self._ld_quarantine_known = len(supervision.quarantine)
        # A worker death's culprit was quarantined while the other workers ran on: with
        # on_error="replace" they are replaced at the next epoch's start (``_reset``).
        self._ld_quarantined_a_death = False
        self._ld_start_method = start_method_of(snapshot)
        self._ld_context = torch_compat.multiprocessing_context_of(snapshot)
        self._ld_iterable = snapshot._dataset_kind == torch_compat.DatasetKind.Iterable
        self._ld_log_dir = collect.make_log_dir()
        self._ld_cleanup = weakref.finalize(self, _remove_log_dir, self._ld_log_dir, os.getpid())
        # IterableDataset: where each worker's stream stands; a re-started pool resumes from it
        self._ld_streams = streams if streams is not None else new_stream_progress(snapshot)
        self._ld_resuming = streams is not None  # a successor: its workers resume their streams
        self._ld_events = EventReader(
            self._ld_log_dir,
            supervision.take_event
            if self._ld_streams is None
            else self._ld_streams.take_events(supervision.take_event),
        )
        generator = snapshot.generator if snapshot.generator is not None else None
        # Replayed by a successor so that its pool draws the same base seed as this one without
        # consuming the user's generator (which would shift every later epoch).
        self._ld_generator_state = (generator or torch.default_generator).get_state()
        self._ld_recorder = FlightRecorder(snapshot.num_workers)
        for worker_id in range(snapshot.num_workers):
            self._ld_recorder.reset_slot(worker_id)

    def _ld_view(self, snapshot: LoaderSnapshot) -> LoaderSnapshot:
        """The loader as the workers see it: the dataset, collate_fn and init wrapped."""
        supervision = self._ld_sup
        policy = supervision.sample_policy(snapshot.drop_last)
        # With on_error="replace" only a worker finds a quarantined sample's substitute, so such
        # a sample cannot simply be left out in the main process (see ``_next_index``).
        self._ld_replacing = policy is not None and policy.on_error == "replace"
        dataset = wrap_dataset(snapshot.dataset, snapshot._dataset_kind, policy)
        # Workers whose dataset loads a whole batch with its own ``__getitems__`` (Hugging Face
        # ``datasets.Dataset``): their recorder names the batch in flight, not the sample.
        self._ld_batched_workers = (
            set(range(snapshot.num_workers))
            if isinstance(dataset, SupervisedBatchedMapDataset)
            else set()
        )
        return snapshot.with_overrides(
            dataset=dataset,
            collate_fn=SupervisedCollate(snapshot.collate_fn, heal=policy is not None),
            worker_init_fn=SupervisedWorkerInit(
                snapshot.worker_init_fn,
                self._ld_recorder,
                self._ld_log_dir,
                snapshot.dataset,
                hang_timeout=supervision.settings.hang_timeout,
                oom_score_adj=supervision.oom_score_adj,
                live_quarantine=live_quarantine.for_pool(supervision, self._ld_iterable),
                stream_resumes=(
                    self._ld_streams.resumes(snapshot.num_workers)
                    if self._ld_streams is not None and self._ld_resuming
                    else None
                ),
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
        self._ld_pool = Pool(
            self._workers, self._index_queues, self._workers_done_event, self._ld_log_dir
        )
        self._ld_pool.first_for_oom_killer(self._ld_sup.oom_score_adj)
        self._ld_sup.oom_notes.extend(self._ld_pool.oom_notes)
        self._ld_sup.worker_pids |= self._ld_pool.pids()
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
        Pool(getattr(self, "_workers", []), [], None, self._ld_log_dir).kill_all()
        vars(self)["_shutdown"] = True
        self._ld_cleanup()
        sup = self._ld_sup
        diagnosis = start_diagnosis(error, self._ld_snapshot, self._ld_start_method)
        if not sup.settings.heal:
            sup.record(diagnosis, "raised")
            try:
                raise start_error(error, diagnosis)
            finally:
                error = None  # type: ignore[assignment]  # no cycle through the traceback
        load_in_process(sup, diagnosis)
        self._ld_successor = SupervisedSingleProcessIter(
            self._ld_snapshot.with_overrides(num_workers=0, timeout=0, prefetch_factor=None),
            sup,
        )
        self._ld_state = IterState.HANDED_OVER

    # --- bookkeeping of what each batch holds -------------------------------------------------
    def _next_index(self) -> Any:
        index = super()._next_index()
        # A sample quarantined after these workers started is unknown to their dataset wrapper
        # (persistent workers keep it for epochs): leave it out here, as the worker would; it
        # counts as skipped when the batch it was left out of (or the next one) is delivered.
        while not self._ld_replacing and len(self._ld_sup.quarantine) > self._ld_quarantine_known:
            index, bad = respawn.without_new_quarantine(self, index)
            self._ld_pending_skips += bad
            if index is not None:
                break
            index = super()._next_index()
        self._ld_last_index = index
        return index

    def _try_put_index(self) -> None:
        sent = self._send_idx
        super()._try_put_index()
        if self._send_idx != sent:
            self._ld_ledger.owe(sent, self._ld_last_index, self._ld_pending_skips)
            self._ld_pending_skips = 0

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        if not first_iter:
            self._ld_epoch = self._ld_watch.epoch = self._ld_sup.epoch
            self._ld_ledger.clear()
            self._ld_respawns = 0  # MAX_RESPAWNS is per epoch, as it is for a fresh iterator
            if self._ld_replacing and self._ld_quarantined_a_death:
                respawn.refresh_workers(self)
            if self._ld_streams is not None:
                self._ld_streams = new_stream_progress(self._ld_snapshot)
            failure: _PoolFailure | None = None
            self._ld_in_reset = True
            try:
                super()._reset(loader, first_iter)
            except _PoolFailure as caught:  # a persistent worker died between epochs
                failure = caught
            finally:
                self._ld_in_reset = False
            if failure is not None:
                try:
                    self._ld_handle(failure)
                finally:
                    failure = None  # no reference cycle through its traceback
            return
        super()._reset(loader, first_iter)

    # --- waiting for data, watching the workers -------------------------------------------
    def _try_get_data(self, timeout: float = torch_compat.MP_STATUS_CHECK_INTERVAL) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            wait = min(POLL_S, max(0.0, deadline - time.monotonic()))
            receive_error: Exception | None = None
            half: Evidence | None = None
            try:
                return (True, self._ld_receive(wait))
            except queue.Empty:
                pass
            except HalfMessage as stalled:
                half = stalled.evidence
            except Exception as error:
                receive_error = error
            if half is not None:
                self._ld_queue_poisoned = True  # never read again: the pool is rebuilt
                raise _PoolFailure(half)
            if receive_error is not None:
                # Outside the except block: the verdict must not arrive chained under the
                # EOFError/ConnectionResetError of the dead sender.
                try:
                    found = self._ld_watch.receive_error(
                        receive_error, self._workers_status, self._task_info
                    )
                    if found is None:
                        raise receive_error
                    raise _PoolFailure(found)
                finally:
                    receive_error = None  # no reference cycle through its traceback
            evidence = self._ld_watch.poll(self._workers_status, self._task_info)
            if evidence is not None:
                raise _PoolFailure(evidence)
            if time.monotonic() >= deadline:
                return (False, None)

    def _ld_receive(self, wait: float) -> Any:
        if self._data_queue is not self._worker_result_queue:  # pin_memory's thread reads it
            return self._data_queue.get(timeout=wait)
        return result_queue.receive(
            self._data_queue,
            wait,
            lambda: self._ld_watch.poll(self._workers_status, self._task_info),
        )

    def _get_data(self) -> Any:
        if self._timeout > 0:
            success, data = self._try_get_data(self._timeout)
            if success:
                return data
            info = self._task_info.get(self._rcvd_idx)
            worker_id = info[0] if info else 0
            message = f"DataLoader timed out after {self._timeout} seconds"
            raise _PoolFailure(self._ld_watch.hang(worker_id, self._task_info, message))
        return super()._get_data()

    def _process_data(self, data: Any, worker_idx: int) -> Any:
        task, indices, skipped = self._ld_ledger.settle_handed_over(self._task_info)
        self._ld_sup.counts["skipped"] += skipped
        self._ld_events.drain_if_new(self._ld_recorder.total(Field.EVENTS))
        if torch_compat.is_exception_wrapper(data):
            self._workers_num_tasks[worker_idx] -= 1
            self._try_put_index()
            ev = self._ld_watch.base("exception", worker_idx)
            ev.batch = task
            error, diagnosis = worker_exception(data, ev, indices, self._ld_snapshot.dataset)
            healable = diagnosis.cause in ENVIRONMENTAL or diagnosis.cause == "internal-error"
            try:
                if self._ld_sup.settings.heal and healable and task is not None:
                    self._ld_sup.counts["skipped"] -= skipped
                    self._ld_ledger.owe(task, indices, skipped)  # still owed to the user
                    raise _PoolFailure(ev, error, diagnosis)
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
        return super()._process_data(data, worker_idx)

    # --- the decision point ---------------------------------------------------------------
    def _next_data(self) -> Any:
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
                failure: _PoolFailure | None = None
                internal: BaseException | None = None
                try:
                    data = super()._next_data()
                except _PoolFailure as caught:
                    failure = caught
                except StopIteration:
                    self._ld_epoch_done()
                    raise
                except Exception as error:
                    deliberate = error is self._ld_raising
                    self._ld_raising = None  # holding it would be a cycle through its frames
                    if deliberate or origin_of(error) is None:
                        raise  # the user's (or torch's) exception, with its verdict
                    internal = error
                if internal is not None:
                    failure = _PoolFailure(internal_evidence(internal, self._ld_epoch), internal)
                if failure is not None:
                    try:
                        self._ld_handle(failure)
                    finally:
                        # An exception kept in a local of this frame holds the frame (and so
                        # this iterator) in a reference cycle through its traceback.
                        failure = internal = None
                    continue
                backoff = self._ld_sup.backoff
                if backoff is not None and backoff.climb_due(at_epoch_start=False):
                    self._ld_climb()
            if isinstance(data, SkippedBatch):
                continue
            return data

    def _ld_from_successor(self) -> Any:
        successor = self._ld_successor
        try:
            data = successor._next_data()
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
        self._ld_sup.counts["skipped"] += self._ld_pending_skips  # the epoch's last batches
        self._ld_pending_skips = 0
        self._ld_events.drain()
        if self._ld_sup.backoff is not None:
            self._ld_sup.backoff.epoch_finished()
        self._ld_sup.tell_watchers("epoch-end")

    def _ld_handle(self, failure: _PoolFailure) -> None:
        """Decide about a failure, then carry the decision out (raise, or heal and hand over)."""
        ev = failure.evidence
        found_alone = False
        if ev.kind == "death" and ev.stage == "fetch" and ev.worker_id in self._ld_batched_workers:
            found_alone = self._ld_name_in_batch(ev)
        diagnosis = failure.diagnosis or diagnose(ev)
        sup = self._ld_sup
        at = Situation(
            heal=sup.settings.heal,
            iterable=self._ld_iterable,
            respawns=self._ld_respawns,
            num_workers=self._num_workers,
            prefetch_factor=self._prefetch_factor,
            kind=ev.kind,
            stage=ev.stage,
            reached_worker_init=ev.reached_worker_init,
            culprit=ev.in_flight_index,
            culprit_quarantined=_quarantined(ev.in_flight_index, sup.quarantine),
            in_process_allowed=sup.settings.allow_in_process,
        )
        if self._ld_iterable:
            at = replace(at, culprit=ev.iterable_position)
        if found_alone:  # re-tried alone already, and it killed its worker again
            at = replace(at, probe_failed_again=True)
        action = POLICY.decide(diagnosis, at)
        # Start the dead worker's replacement now, so that its start-up overlaps the probe
        # (with on_error="replace" it must know the quarantine: it starts after the decision).
        replacement = None
        worker_id = ev.worker_id
        if (
            worker_id is not None
            and not self._ld_replacing
            and self._ld_streams is None  # a stream's resume waits for the culprit's position
            and not (action.kind is ActionKind.PROBE and memory_suspect(diagnosis))
            and self._ld_can_replace(action, at, ev)
        ):
            replacement = self._ld_replace_early(worker_id)
        if action.kind is ActionKind.PROBE:
            action = self._ld_probe(diagnosis, at, ev.in_flight_index)
        if sup.backoff is not None:
            sup.backoff.failed()
        if action.kind is ActionKind.RAISE:
            self._ld_raise(failure, diagnosis)
        stream = self._ld_stream_culprit(ev, diagnosis) if self._ld_streams is not None else None
        self._ld_heal(diagnosis, action, at, ev, replacement, stream)

    def _ld_name_in_batch(self, ev: Evidence) -> bool:
        """A worker died inside the dataset's own ``__getitems__``, which loads the batch at
        once: its recorder holds the batch's first index, not the sample that killed it (111
        was named when 37 crashed: issue 23 item 3). Re-try the batch's samples one by one in a
        fresh worker: the one that kills it again is the culprit (True); else the evidence says
        "one of" the batch, and no sample is named."""
        batch = list(ev.batch_indices or [ev.in_flight_index])
        ev.in_flight_index = ev.sample_file = None
        shown = ", ".join(repr(i) for i in batch[:16]) + (", …" if len(batch) > 16 else "")
        head = (
            "the dataset's own __getitems__ loads a batch at once, so the sample in flight was "
            f"one of [{shown}]"
        )
        if len(batch) == 1:
            ev.in_flight_index = batch[0]
            ev.notes.append(head)
            return False
        outcome = probe_batch(self._ld_snapshot, batch)
        if isinstance(outcome, str):
            self._ld_sup.counts["probe_failures"] += 1
            ev.notes.append(f"{head}; re-trying them alone failed ({outcome})")
        elif outcome is None:
            ev.notes.append(f"{head}; each loaded fine alone in a fresh worker")
        else:
            ev.in_flight_index = outcome
            ev.sample_file = sample_file(self._ld_snapshot.dataset, outcome)
            ev.notes.append(
                f"{head}; re-tried one by one in a fresh worker, sample {outcome!r} killed it again"
            )
            return True
        return False

    def _ld_probe(self, diagnosis: Diagnosis, at: Situation, culprit: Any) -> Action:
        """Re-try the sample in flight alone, then decide again on what that showed."""
        outcome = probe(self._ld_snapshot, culprit)
        if isinstance(outcome, str):  # the probe could not tell: never the sample's failure
            self._ld_sup.counts["probe_failures"] += 1
            return POLICY.decide(diagnosis, replace(at, probe_error=outcome))
        action = POLICY.decide(diagnosis, replace(at, probe_failed_again=outcome))
        if outcome and action.kind is ActionKind.QUARANTINE:
            reproduced_alone(diagnosis, culprit)  # its first evidence line says what the note did
            action = replace(action, note="")
        return action

    def _ld_raise(self, failure: _PoolFailure, diagnosis: Diagnosis) -> NoReturn:
        self._ld_sup.record(diagnosis, "raised")
        error, failure.error = failure.error, None
        if error is None:
            # torch's own first line (for a user's timeout: torch's timeout message)
            headline = next(
                (n for n in failure.evidence.notes if n.startswith("DataLoader timed out after")),
                format_death_headline(diagnosis),
            )
            message = f"{headline}\n{format_verdict(diagnosis)}"
            error_type = WorkerHangError if failure.evidence.kind == "hang" else WorkerDiedError
            error = error_type(message, diagnosis)
            self._ld_failure = (message, diagnosis)
            self._ld_state = IterState.FAILED
            self._ld_stop()
        elif diagnosis.cause == "internal-error":
            attach(error, diagnosis)
            error.add_note(format_verdict(diagnosis, include_stack=False))
        try:
            raise error
        finally:
            error = None  # a raised exception kept in a local is a cycle through its frame

    def _ld_heal(
        self,
        diagnosis: Diagnosis,
        action: Action,
        at: Situation,
        ev: Evidence,
        replacement: Replacement | None,
        stream: tuple[str, str] | None = None,
    ) -> None:
        sup = self._ld_sup
        culprit = ev.in_flight_index if stream is None else None  # a stream's is named apart
        if action.note:
            diagnosis.evidence.append(action.note)
        detail = f" (sample {culprit!r})" if culprit is not None else ""
        recorded_as = action.kind.value
        if stream is not None:  # a stream's culprit: (how it was recorded, what the warning says)
            recorded_as, detail = stream
        if action.kind is ActionKind.QUARANTINE:
            sup.quarantine_add(culprit, diagnosis)
        elif action.kind is ActionKind.BACK_OFF:
            diagnosis.evidence.append(
                f"continuing with num_workers={action.num_workers}, "
                f"prefetch={action.prefetch_factor}"
            )
            self._ld_step("down", action.num_workers, action.prefetch_factor, diagnosis.cause)
            detail = (
                f" (num_workers={action.num_workers}, prefetch_factor={action.prefetch_factor})"
            )
        elif action.kind is ActionKind.FALL_BACK:
            diagnosis.evidence.append(
                "plain torch loading takes over for the rest of this loader's life"
            )
            sup.plain_torch = True
        alone = self._ld_respawned_alone(diagnosis, action, at, ev, replacement)
        sup.record(diagnosis, recorded_as)
        if action.kind is ActionKind.FALL_BACK:
            warnings.warn(
                "loaderdoctor's own machinery failed (internal-error, please report it); this "
                "DataLoader continues as a plain torch DataLoader, without supervision.\n"
                + format_verdict(diagnosis),
                RuntimeWarning,
                stacklevel=user_stacklevel(),
            )
        else:
            warnings.warn(
                f"loaderdoctor healed: {diagnosis.title} [{diagnosis.cause}] -> "
                f"{recorded_as}{detail}",
                HealWarning,
                stacklevel=user_stacklevel(),
            )
        if not alone:
            self._ld_hand_over(
                action.num_workers,
                action.prefetch_factor,
                plain=action.kind is ActionKind.FALL_BACK,
            )

    def _ld_respawned_alone(
        self,
        diagnosis: Diagnosis,
        action: Action,
        at: Situation,
        ev: Evidence,
        replacement: Replacement | None,
    ) -> bool:
        """Finish replacing the failed worker alone (True), or say why the pool is rebuilt."""
        late = replacement is None and (
            self._ld_replacing or self._ld_streams is not None or memory_suspect(diagnosis)
        )
        if late and ev.worker_id is not None and self._ld_can_replace(action, at, ev):
            if self._ld_streams is not None:
                replacement = self._ld_replace_stream_worker(ev.worker_id)
            else:
                replacement = self._ld_replace(ev.worker_id, dataset=respawn.current_dataset(self))
        if replacement is not None and replacement.refused:
            diagnosis.evidence.append(replacement.refused)
            return False
        if replacement is None or not replaces_one_worker(action, at):
            return False  # a back-off: the replacement stops with the pool
        diagnosis.evidence.append(respawn.resend_owed(self, replacement))
        self._ld_quarantined_a_death |= action.kind is ActionKind.QUARANTINE
        return True

    def _ld_step(self, direction: str, num_workers: int, prefetch_factor: int, reason: str) -> None:
        self._ld_sup.step(direction, num_workers, prefetch_factor, reason)

    def _ld_climb(self) -> None:
        backoff = self._ld_sup.backoff
        assert backoff is not None
        rung = backoff.rung_up()
        if rung is None:
            return
        reason = f"{backoff.healthy_batches} batches without an environmental failure"
        self._ld_step("up", rung[0], rung[1], reason)
        warnings.warn(
            f"loaderdoctor: {reason}; back up to num_workers={rung[0]}, prefetch_factor={rung[1]}",
            HealWarning,
            stacklevel=user_stacklevel(),
        )
        self._ld_hand_over(rung[0], rung[1])

    # --- acting ---------------------------------------------------------------------------
    def _ld_can_replace(self, action: Action, at: Situation, ev: Evidence) -> bool:
        """The policy replaces one worker, and this pool can do it now."""
        return (
            replaces_one_worker(action, at)
            and ev.worker_id is not None
            and not self._ld_in_reset  # torch's _reset counts its workers' resume replies
            and not self._pin_memory  # its thread reads the result queue; ours must not race it
            and not self._ld_pool.is_alive(ev.worker_id)
        )

    def _ld_replace(
        self, worker_id: int, worker_init_fn: Any = None, dataset: Any = None
    ) -> Replacement:
        """Start a new process in place of the dead worker ``worker_id``, the others running
        on; ``worker_init_fn`` or ``dataset`` replace the pool's own (a per-worker resume, a grown
        quarantine). The owed batches follow with ``respawn.resend_owed``."""
        return respawn.replace(self, worker_id, worker_init_fn, dataset)

    def _ld_replace_early(self, worker_id: int) -> Replacement:
        """The replacement started before the probe, so that their start-ups overlap. It knows
        the quarantine as it is now: a worker fetches more than the main process sends it (a
        reference sample for a ragged batch), and one started with the pool's first view would
        fetch a quarantined sample and die of it, replacement after replacement."""
        return self._ld_replace(worker_id, dataset=respawn.current_dataset(self))

    def _ld_replace_stream_worker(self, worker_id: int) -> Replacement:
        """Replace a dead stream worker alone: it resumes its own stream after the last batch
        the main process holds from it (delivered, or waiting in torch's reorder buffer)."""
        streams = self._ld_streams
        assert streams is not None
        refused = respawn.settle_results(self, worker_id)
        if refused:
            return Replacement(worker_id, refused=refused)
        self._ld_events.drain()  # every skip the dead worker wrote: its replay drops them too
        buffered = [
            info[1]
            for info in self._task_info.values()
            if len(info) == 2 and info[0] == worker_id and isinstance(info[1], StreamBatch)
        ]
        init = copy.copy(self._worker_init_fn)
        init.stream_resumes = {worker_id: streams.resume_after(worker_id, buffered)}
        return self._ld_replace(worker_id, worker_init_fn=init)

    def _ld_hand_over(self, num_workers: int, prefetch_factor: int, plain: bool = False) -> None:
        """Stop this pool; a successor serves what is owed, then the rest of the epoch."""
        owed = self._ld_ledger.owed_in_order()
        self._ld_sup.counts["resent_batches"] += len(owed)
        # what was left out of the owed batches: the successor does not know it (counted now)
        self._ld_sup.counts["skipped"] += self._ld_ledger.skipped_owed() + self._ld_pending_skips
        self._ld_pending_skips = 0
        if self._ld_streams is not None:
            self._ld_events.drain()  # every skip the dead worker wrote: a replay drops them too
            self._ld_stream_undelivered()
        remaining = self._sampler_iter
        self._ld_stop()
        self._ld_ledger.clear()
        generator = torch.Generator()
        generator.set_state(self._ld_generator_state)
        snapshot = self._ld_snapshot.with_overrides(
            _index_sampler=ResumeSampler(owed, remaining, length_of(self._index_sampler)),
            generator=generator,
            persistent_workers=False,
            num_workers=num_workers,
            prefetch_factor=prefetch_factor if num_workers else None,
        )
        if num_workers == 0:
            snapshot = snapshot.with_overrides(timeout=0)
        successor: Any
        if plain:
            successor = (
                torch_compat.MultiProcessingIter(snapshot)
                if num_workers
                else torch_compat.SingleProcessIter(snapshot)
            )
        elif num_workers == 0:
            successor = SupervisedSingleProcessIter(snapshot, self._ld_sup)
        else:
            successor = SupervisedMultiProcessingIter(
                snapshot, self._ld_sup, respawns=self._ld_respawns + 1, streams=self._ld_streams
            )
        self._ld_successor = successor
        self._ld_state = IterState.HANDED_OVER

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

    def _mark_worker_as_unavailable(self, worker_id: int, shutdown: bool = False) -> None:
        if not shutdown and self._ld_streams is not None:
            self._ld_streams.ended(worker_id)  # its stream ended: a re-started one stays ended
        super()._mark_worker_as_unavailable(worker_id, shutdown)

    def _ld_stream_undelivered(self) -> None:
        """A worker whose end torch saw may still have batches waiting in torch's reorder buffer
        (the end marker is read as it comes): its stream has not ended for the user yet."""
        streams = self._ld_streams
        assert streams is not None
        for info in self._task_info.values():
            if len(info) == 2:
                streams.not_ended(info[0])

    def _ld_stream_culprit(self, ev: Evidence, diagnosis: Diagnosis) -> tuple[str, str]:
        """The item in flight at a death is re-tried once when the stream resumes, as a
        map-style sample is; one that kills its worker again ends that worker's stream just
        before it (a generator cannot be read past it): (action, detail)."""
        streams = self._ld_streams
        assert streams is not None
        worker, position = ev.worker_id, ev.iterable_position
        if worker is None or position is None:
            diagnosis.evidence.append(
                "each re-started worker resumes its stream after its last delivered item"
            )
            return "respawned", ""
        named = f"item #{position} of worker {worker}'s stream"
        streams.incident = diagnosis  # a replay found not to match says so in its evidence
        if streams.culprit(worker, position, diagnosis):
            diagnosis.evidence.append(
                f"{named} is re-tried once: worker {worker}'s stream resumes at that item"
            )
            return "respawned", f" ({named}, re-tried once)"
        self._ld_sup.counts["skipped"] += 1
        lost = f"worker {worker}'s items from #{position} on are lost"
        diagnosis.evidence.append(
            f"worker {worker} died at its item #{position} again: its stream cannot be read past "
            f"it, so {lost}; its items before #{position} arrive (the other workers resume)"
        )
        return "lost", f" ({named}; {lost})"

    def _ld_stop(self) -> None:
        self._ld_pool.stop(self._workers_status)
        self._shutdown_workers()

    def _ld_drain(self) -> None:
        """Read the events written so far (``loader.report`` asks, mid-epoch)."""
        if self._ld_state is IterState.RUNNING and not getattr(self, "_shutdown", True):
            self._ld_events.drain()
        successor = self._ld_successor
        if isinstance(successor, SupervisedMultiProcessingIter):
            successor._ld_drain()

    def _shutdown_workers(self) -> None:
        pool = getattr(self, "_ld_pool", None)
        if pool is not None and not pool.owned_here():
            # A forked child inherited this iterator: its workers are not this process's
            # children, so there is nothing to stop (and torch's join would raise here).
            vars(self)["_shutdown"] = True
            return
        successor = getattr(self, "_ld_successor", None)
        if successor is not None and hasattr(successor, "_shutdown_workers"):
            successor._shutdown_workers()
        was_shut = getattr(self, "_shutdown", True)
        super()._shutdown_workers()
        if not was_shut and getattr(self, "_shutdown", False):
            self._ld_events.drain()
            self._ld_cleanup()
            if self._ld_state is IterState.RUNNING:
                self._ld_state = IterState.CLOSED


def _quarantined(index: Any, quarantine: Any) -> bool:
    try:
        return index is not None and index in quarantine
    except TypeError:  # an unhashable index
        return False


def probe(snapshot: LoaderSnapshot, index: Any) -> bool | str:
    """Load ``index`` alone in a fresh worker: True when it fails again, False when it loads.

    A string says why the probe itself could not tell (its worker could not start, or
    loaderdoctor's own machinery failed): logged, and never taken for the sample's failure,
    which would quarantine a healthy sample.
    """
    outcome = probe_batch(snapshot, [index])
    return outcome if isinstance(outcome, str) else outcome is not None


def probe_batch(snapshot: LoaderSnapshot, indices: list[Any]) -> Any:
    """Load ``indices`` one by one, alone, in a fresh worker: the first one that fails (None
    when all load). A string says why the probe itself could not tell, as ``probe``'s does."""
    loader = torch.utils.data.DataLoader(
        snapshot.dataset,
        batch_size=None,  # each sample by ``dataset[index]``, so the recorder names it
        sampler=indices,
        num_workers=1,
        worker_init_fn=snapshot.worker_init_fn,
        multiprocessing_context=snapshot.multiprocessing_context,
    )
    settings = Settings(
        hang_timeout=PROBE_TIMEOUT_S,
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


def _fails_at(diagnosis: Diagnosis, index: Any) -> bool:
    """The diagnosis is of the sample ``index`` failing (not of a worker that never reached it,
    nor of loaderdoctor's own machinery)."""
    if diagnosis.cause == "internal-error":
        return False
    try:
        return index in diagnosis.indices
    except (TypeError, ValueError):  # an index that does not compare (an array)
        return False


__all__ = ["POLL_S", "SupervisedMultiProcessingIter", "probe", "start_method_of"]
