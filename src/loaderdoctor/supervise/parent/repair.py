"""What a supervised multiprocessing iterator does about a failed worker, once it is decided:
the executor of a ``Plan`` (``recovery`` plans).

It replaces one worker (a new process with its ``worker_id``, started as torch starts one, the
batches it owed re-sent, in order), settles the result queue, stops the pool and hands over to a
successor (a rebuilt pool, a back-off, a stream resumed, plain torch), grows a backed-off pool
back, or raises; and it writes the plan's incident, once, when everything it says is known
(``record``: the one place an incident of a failure is recorded and warned about).

It reads and writes torch's bookkeeping only through ``torch_compat.IteratorBooks`` and starts
processes only through the ``Pool``; the successor is built by a callable handed in, so that it
holds no reference to the iterator class: no reference cycle. The result queue is settled under
its writer lock before a replacement starts, or found unusable (a worker killed mid-write) and
the whole pool is rebuilt instead.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import functools
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from loaderdoctor import boundary, torch_compat
from loaderdoctor.forensics import Diagnosis, Evidence, diagnose
from loaderdoctor.forensics.incident import FollowUp, Incident
from loaderdoctor.forensics.verdict_text import format_death_headline, format_verdict
from loaderdoctor.recorder import FlightRecorder
from loaderdoctor.supervise import sharing
from loaderdoctor.supervise.errors import (
    HealingStoppedError,
    WorkerDiedError,
    WorkerHangError,
    attach,
)
from loaderdoctor.supervise.heal import (
    HealWarning,
    ResumeSampler,
    length_of,
    user_stacklevel,
    warn_healed,
    warn_sample_action,
)
from loaderdoctor.supervise.heal_policy import Action, ActionKind
from loaderdoctor.supervise.parent import collect
from loaderdoctor.supervise.parent.collect import EventReader
from loaderdoctor.supervise.parent.ledger import Ledger
from loaderdoctor.supervise.parent.pool import Pool
from loaderdoctor.supervise.parent.supervision import LoaderSnapshot, Supervision
from loaderdoctor.supervise.parent.watch import TIMEOUT_PREFIX, PoolFailure, WorkerWatch
from loaderdoctor.supervise.shared_failure import (
    inherited_state,
    ragged_diagnosis,
    stop_diagnosis,
)
from loaderdoctor.supervise.streams import Learnt, StreamBatch, StreamProgress
from loaderdoctor.supervise.worker.datasets import SupervisedBatchedMapDataset
from loaderdoctor.supervise.worker.sample_policy import HealedBatch

# How long a respawn waits for the result queue's writer lock before it calls the queue poisoned
# (held by a worker killed mid-write); a healthy writer holds it for one batch's write.
RESULT_LOCK_WAIT_S = 5.0
MAX_SETTLED_RESULTS = 100_000
TABLE_FULL_NOTE = (
    "the running workers' table of quarantined samples is full: the pool is rebuilt, and its new "
    "workers start knowing the whole quarantine"
)
SUBSTITUTE_NOTE = "its place in a batch of epoch"
FALL_BACK_WARNING = (
    "loaderdoctor's own machinery failed (internal-error, please report it); this DataLoader "
    "continues as a plain torch DataLoader, without supervision.\n"
)


def record(
    supervision: Supervision,
    diagnosis: Diagnosis,
    action: str,
    outcome: str = "",
    event: dict[str, Any] | None = None,
) -> Incident:
    """Write one incident and say it: a raise is said by the error itself; plain torch taking
    over in a ``RuntimeWarning`` with the verdict; a sample skipped or replaced in a worker
    (``event``) in a rate-limited ``HealWarning``; anything else healed in a ``HealWarning`` that
    ends with ``outcome`` (what was done, to what; the action by default). The one place an
    incident is written: it is final here (what is learnt later is a ``follow_up``)."""
    incident = supervision.log.append(diagnosis, action)
    if action == "raised":
        return incident
    if event is not None:
        seen, supervision.sample_actions = (
            supervision.sample_actions,
            supervision.sample_actions + 1,
        )
        warn_sample_action(diagnosis.title, diagnosis.cause, action, event, seen)
        return incident
    if action == "fell-back":
        warnings.warn(
            FALL_BACK_WARNING + format_verdict(diagnosis),
            RuntimeWarning,
            stacklevel=user_stacklevel(),
        )
        return incident
    warn_healed(diagnosis.title, diagnosis.cause, outcome or action)
    return incident


def follow_up(supervision: Supervision, learnt: Iterable[Learnt]) -> None:
    """Link what was learnt after an incident was written to it: (its id, an evidence line,
    a stream culprit's key or None, the action it turned out to be or None), each a
    ``FollowUp`` record of its own."""
    for of, line, key, action in learnt:
        supervision.log.follow_up(FollowUp(of, (line,), key, action))


# --- what the workers decided alone: a sample skipped or replaced ---------------------------
def take_events(supervision: Supervision, events: Iterable[dict[str, Any]]) -> None:
    for event in events:
        take_event(supervision, event)


def take_in_process_events(supervision: Supervision) -> None:
    """The events the loader's in-process iterators sent alone (``in_process_events``)."""
    events = supervision.in_process_events
    while events:
        take_event(supervision, events.pop(0))


def delivered_batch(supervision: Supervision, indices: Any, data: Any) -> Any:
    """A map-style batch handed to the user: its samples' skips and replacements count first,
    then the batch (``Supervision.delivered_batch``, which unwraps it)."""
    if isinstance(data, HealedBatch):
        take_events(supervision, data.events)
    return supervision.delivered_batch(indices, data)


def take_event(supervision: Supervision, event: dict[str, Any]) -> None:
    """A skip or replace decided in a worker (or in this process) enters the counts and log."""
    kind = event.get("kind")
    if kind == boundary.SHARED_HANDLE_EVENT:
        supervision.warn_shared_handles(event)
        return
    if kind == boundary.RNG_STATES_EVENT:
        supervision.data.worker_random_states(event)
        return
    if kind == boundary.FEATURE_OFF_EVENT:
        supervision.feature_off(str(event.get("feature")), str(event.get("reason")))
        return
    action = event.get("action", "skipped")
    if action == "replaced":
        supervision.counts.replaced += 1
    else:
        supervision.counts.skipped += 1
    if event.get("stage") == "quarantined":
        # known bad from an earlier incident or the quarantine file: no new verdict
        if action == "replaced":
            _note_substitute(supervision, event.get("index"), event.get("substitute"))
        return
    index = event.get("index")
    ev = collect.sample_event_evidence(event, supervision.epoch, supervision.dataset)
    diagnosis = diagnose(ev)
    record(supervision, diagnosis, action, event=event)
    supervision.quarantine_add(index, diagnosis)
    _stop_if_ragged(supervision, index, event)
    _stop_if_shared(supervision, index, event)


def _stop_if_shared(supervision: Supervision, index: Any, event: dict[str, Any]) -> None:
    """Raise ``HealingStoppedError`` when this skip makes the failure a shared one (the same
    failure on a streak of samples, or skips past ``max_skipped``). The streak's samples
    leave the quarantine: the failure was not theirs."""
    if supervision.shared is None:
        return
    sample = index if event.get("position") is None else (event.get("worker"), event["position"])
    stop = supervision.shared.failed(sample, event.get("exception_type"), event.get("message"))
    if stop is None:
        return
    diagnosis = stop_diagnosis(stop, supervision.epoch, inherited_state(supervision.dataset))
    if supervision.shared_stop is None:
        if stop.reason == "shared":
            supervision.quarantine_release(stop.alike)
        record(supervision, diagnosis, "raised")
        supervision.shared_stop = diagnosis
    raise HealingStoppedError(
        f"loaderdoctor stopped healing: {stop.signature}\n{format_verdict(diagnosis)}",
        diagnosis,
    )


def _stop_if_ragged(supervision: Supervision, index: Any, event: dict[str, Any]) -> None:
    """Raise ``HealingStoppedError`` when the samples skipped from batches that did not
    collate show a ragged field: every batch fails the same way, no sample is to blame
    (they leave the quarantine)."""
    if not supervision.settings.heal or not isinstance(event.get("shapes"), dict):
        return
    ragged = supervision.ragged.skipped(index, event["shapes"], event.get("message"))
    if ragged is None:
        return
    diagnosis = ragged_diagnosis(ragged, supervision.epoch)
    if supervision.shared_stop is None:
        supervision.quarantine_release(ragged.samples)
        record(supervision, diagnosis, "raised")
        supervision.shared_stop = diagnosis
    raise HealingStoppedError(
        f"loaderdoctor stopped healing: {diagnosis.title}\n{format_verdict(diagnosis)}",
        diagnosis,
    )


def _note_substitute(supervision: Supervision, index: Any, substitute: Any) -> None:
    """A quarantined sample's place was filled by a substitute (on_error="replace", which
    torch.distributed makes of a skip so that every rank yields as many batches): the
    incident that quarantined it says so, once (not per epoch), since the substitute arrives
    twice."""
    for incident in reversed(supervision.log):
        try:
            named = index in incident.diagnosis.indices
        except (TypeError, ValueError):  # an index that does not compare (an array)
            named = False
        if named:
            if not any(line.startswith(SUBSTITUTE_NOTE) for line in incident.diagnosis.evidence):
                line = (
                    f"{SUBSTITUTE_NOTE} {supervision.epoch} was filled by sample "
                    f"{substitute!r}, which so arrives twice"
                )
                follow_up(supervision, [(incident.id, line, None, None)])
            return


@dataclass(frozen=True)
class Resumed:
    """The failed worker was replaced alone: the iterator goes on reading its pool."""


@dataclass(frozen=True)
class HandOver:
    """This pool is stopped: ``successor`` serves what was owed, then the rest of the epoch."""

    successor: Any


@dataclass
class Raise:
    """Raise ``error`` to the user; ``failure`` (message, verdict) when the iterator stops for
    good (every later ``next()`` says so). The caller forgets the error once raised: kept, its
    traceback would hold the iterator's frame in a reference cycle."""

    error: BaseException | None
    failure: tuple[str, Diagnosis] | None = None


Outcome = Resumed | HandOver | Raise


@dataclass(frozen=True)
class Successor:
    """What a successor iterator is built from (by the iterator module's callable)."""

    snapshot: LoaderSnapshot
    supervision: Supervision
    plain: bool  # plain torch, unsupervised (loaderdoctor's own machinery failed)
    respawns: int
    streams: StreamProgress | None
    # Where a loader that resumes from its own state goes on (``Recovery(resume_point=...)``):
    # what that callable returned when this pool stopped; None for torch's DataLoader, whose
    # successor reads the owed batches and the rest of the sampler from ``snapshot``.
    resume_point: Any = None


@dataclass(frozen=True)
class Replacement:
    """A dead worker's replacement, started (``new_pid``) or refused (why, in ``refused``)."""

    worker_id: int
    old_pid: int | None = None
    new_pid: int | None = None
    refused: str = ""


class Move(enum.Enum):
    """What a plan does to the pool."""

    REPLACE = "replace one worker"  # the others run on (a refused replacement rebuilds)
    REBUILD = "rebuild"  # a successor pool of the plan's num_workers and prefetch_factor
    FALL_BACK = "fall back"  # plain torch loading takes over
    RAISE = "raise"
    # A death found while the pool stopped for another's failure: its batches go with the rest
    SETTLE = "settle"


@dataclass
class Plan:
    """One failure, decided: what the executor does, and the incident it writes once done."""

    move: Move
    diagnosis: Diagnosis
    action: Action  # the policy's: the next pool's shape, a sharing strategy to switch to
    record_as: str  # the incident's action
    detail: str = ""  # what the warning says after the action
    worker_id: int | None = None
    culprit: Any = None
    quarantine: bool = False  # quarantine ``culprit`` (its workers told, or a new pool's)
    replacement: Replacement | None = None  # started while the plan was made (a re-try overlaps)
    replace_early: bool = False  # the replacement starts first (``Decision.replace_early``)
    replace_late: bool = False  # or only once the rest is done (``Decision.replace_late``)
    counts_death: bool = False
    holds_back: bool = False
    failure: PoolFailure | None = None  # a raise: the failure whose error or verdict is raised
    stopped_because: str | None = None  # a raise: the limit or control healing stopped at
    handled: int | None = None  # a settle: the worker whose failure stopped the pool
    # A stream's culprit: (worker_id, position, re-tried), linked to the incident once written
    stream_at: tuple[int, int, bool] | None = None


@dataclass(eq=False)
class PoolParts:
    """One pool's parts, the one object its supervisor and its planner and executor all hold
    (none holds another's parts apart): torch's books, what is owed, the flight recorder, the
    events the workers wrote, how a worker ended, a stream's progress."""

    sup: Supervision
    snapshot: LoaderSnapshot
    books: torch_compat.IteratorBooks
    ledger: Ledger
    recorder: FlightRecorder
    events: EventReader
    streams: StreamProgress | None  # IterableDataset: where each worker's stream stands
    watch: WorkerWatch | None = None  # once torch's __init__ started the workers
    iterable: bool = field(init=False)

    def __post_init__(self) -> None:
        self.iterable = torch_compat.is_iterable(self.snapshot)


class Phase(enum.Enum):
    RUNNING = "running"
    RESETTING = "resetting"  # torch's _reset waits for its workers' resume replies


class Repair:
    """Carries out the plans of one pool's failures; also keeps what the pool's workers know."""

    def __init__(
        self,
        parts: PoolParts,
        *,
        respawns: int,
        context: Any,
        successor: Callable[[Successor], Any],
        resume_point: Callable[[], Any] | None = None,
    ) -> None:
        self.parts = parts
        self.respawns = respawns
        self.context = context
        self.build_successor = successor
        # Replayed by a successor so that its pool draws the same base seed as this one without
        # consuming the user's generator (which would shift every later epoch).
        self.generator_state = (parts.snapshot.generator or torch.default_generator).get_state()
        # A loader whose own state records its pool (torchdata's StatefulDataLoader): a stopped
        # pool is resumed from that state (``resume_point()``, taken before the pool stops), never
        # with fewer workers, and one worker is never replaced alone (its worker loop is not
        # torch's).
        self.resume_point = resume_point
        self.pool: Pool | None = None  # once torch's __init__ started the workers
        self.stopped = False
        self.phase = Phase.RUNNING
        self.queue_poisoned = False  # a worker died mid-write: the result queue is unusable
        # The pool's dataset loads a whole batch with its own ``__getitems__`` (Hugging Face
        # ``datasets.Dataset``): its workers' recorders name the batch in flight, not the sample.
        self.batched = False
        # Plans a death found while stopping (``recovery`` sets it): executed as any plan
        self.plan_beside: Callable[[Evidence, int], Plan] | None = None

    # --- what the workers know ---------------------------------------------------------------
    def learns(self, dataset: Any) -> None:
        """The pool's workers load ``dataset`` (a view with the sample policy); so does a
        worker replaced alone, which learns every later quarantine from the live table."""
        self.batched = isinstance(dataset, SupervisedBatchedMapDataset)

    def watches(self, pool: Pool, watch: WorkerWatch | None = None) -> None:
        """torch's ``__init__`` started the workers: from now on ``pool`` owns them, and
        ``watch`` tells how one of them ended."""
        self.pool = pool
        self.parts.watch = watch

    def result_queue_unreadable(self) -> None:
        """Half a message is left in the result queue: no worker is replaced alone from now on
        (its replacement would share the queue); the whole pool is rebuilt instead."""
        self.queue_poisoned = True

    @contextlib.contextmanager
    def resetting(self) -> Iterator[None]:
        """While torch's ``_reset`` waits for its persistent workers' resume replies, which it
        counts: a worker replaced alone then would never send one."""
        self.phase = Phase.RESETTING
        try:
            yield
        finally:
            self.phase = Phase.RUNNING

    def owe(self, task: int, indices: Any) -> None:
        """Task ``task`` (``indices``) was sent to a worker: owed until delivered."""
        self.parts.ledger.owe(task, indices)

    def new_epoch(self, streams: StreamProgress | None) -> None:
        self.parts.ledger.clear()
        self.respawns = 0  # counted per epoch, as for a fresh iterator
        self.parts.streams = streams

    # --- carrying a plan out ------------------------------------------------------------------
    def carry(self, plan: Plan) -> Outcome:
        """Carry ``plan`` out; its incident is written once everything it says is known."""
        if plan.move is Move.SETTLE:
            self._settle(plan)
            return Resumed()
        if plan.replace_early and self.parts.streams is None:  # a stream's waits for its culprit
            plan.replacement = self.replace_now(plan.worker_id)
        if plan.counts_death:
            self.parts.sup.history.deaths_in_a_row += 1
        if self.parts.sup.backoff is not None and plan.holds_back:
            self.parts.sup.backoff.failed()
        if plan.move is Move.RAISE:
            assert plan.failure is not None
            return self.raise_failure(plan.failure, plan.diagnosis, plan.stopped_because)
        return self._heal(plan)

    def _heal(self, plan: Plan) -> Outcome:
        diagnosis, action, sup = plan.diagnosis, plan.action, self.parts.sup
        told = not plan.quarantine or self._quarantine(plan.culprit, diagnosis)
        if action.kind is ActionKind.BACK_OFF:
            sup.step("down", action.num_workers, action.prefetch_factor, diagnosis.cause)
        elif plan.move is Move.FALL_BACK:
            sup.falls_back_to_plain_torch()
        if action.sharing_strategy is not None:
            sup.worker_sharing_strategy = sharing.switch_to(action.sharing_strategy)
        alone = told and self._respawned_alone(plan)
        incident = record(sup, diagnosis, plan.record_as, f"{plan.record_as}{plan.detail}")
        if plan.stream_at is not None and self.parts.streams is not None:
            self.parts.streams.incident_written(incident, *plan.stream_at)
        if alone:
            return Resumed()
        return self.hand_over(
            action.num_workers,
            action.prefetch_factor,
            plain=plan.move is Move.FALL_BACK,
            handled=plan.worker_id,
        )

    def _settle(self, plan: Plan) -> None:
        """A worker that died while another's failure was handled: its sample quarantined as
        any other would be (a new pool follows: it knows), its batches re-sent with the rest."""
        if plan.quarantine:
            self._quarantine(plan.culprit, plan.diagnosis)
        plan.diagnosis.evidence.append(
            f"worker {plan.worker_id} died while the pool was stopped for worker "
            f"{plan.handled}'s failure: its owed batches are re-sent with the others'"
        )
        record(self.parts.sup, plan.diagnosis, plan.record_as, f"{plan.record_as}{plan.detail}")

    def _quarantine(self, index: Any, diagnosis: Diagnosis) -> bool:
        """Quarantine ``index``; False when the running workers cannot be told (a new pool's
        workers start knowing it)."""
        if self.parts.sup.quarantine_add(index, diagnosis):
            return True
        diagnosis.evidence.append(TABLE_FULL_NOTE)
        return False

    def _respawned_alone(self, plan: Plan) -> bool:
        """Finish replacing the failed worker alone (True), or say why the pool is rebuilt."""
        diagnosis, replacement = plan.diagnosis, plan.replacement
        alone = plan.move is Move.REPLACE
        late = replacement is None and (self.parts.streams is not None or plan.replace_late)
        if late and alone and self.can_replace(plan.worker_id):
            replacement = self.replace_now(plan.worker_id)
        if replacement is not None and replacement.refused:
            diagnosis.evidence.append(replacement.refused)
            return False
        if replacement is None or not alone:
            return False  # a back-off: the replacement stops with the pool
        diagnosis.evidence.append(self.resend_owed(replacement))
        return True

    def raise_failure(
        self, failure: PoolFailure, diagnosis: Diagnosis, stopped_because: str | None = None
    ) -> Raise:
        """Raise the failure with its verdict; ``stopped_because``: healing stopped at a limit
        or a control (a ``HealingStoppedError`` whose first line says why)."""
        record(self.parts.sup, diagnosis, "raised")
        error, failure.error = failure.error, None
        if error is not None:
            if diagnosis.cause == "internal-error":
                attach(error, diagnosis)
                error.add_note(format_verdict(diagnosis, include_stack=False))
            return Raise(error)
        # torch's own first line (for a user's timeout: torch's timeout message)
        headline = next(
            (n for n in failure.evidence.notes if n.startswith(TIMEOUT_PREFIX)),
            format_death_headline(diagnosis),
        )
        message = f"{headline}\n{format_verdict(diagnosis)}"
        error_type: type[WorkerDiedError | HealingStoppedError] = (
            WorkerHangError if failure.evidence.kind == "hang" else WorkerDiedError
        )
        if stopped_because is not None:
            error_type = HealingStoppedError
            message = f"loaderdoctor {stopped_because}\n{message}"
        self.stop()
        return Raise(error_type(message, diagnosis), (message, diagnosis))

    def start_over(
        self, diagnosis: Diagnosis, worker_id: int | None, resume_point: Any, culprit: Any = None
    ) -> HandOver:
        """A worker died (or got stuck) while the pool was being built: a new pool starts over
        from ``resume_point`` (the state this one was given, and the sampler tail and streams it
        went on with); ``culprit``: a sample that failed again alone, quarantined first (the new
        pool's workers start knowing it)."""
        if culprit is not None:
            self._quarantine(culprit, diagnosis)
            record(self.parts.sup, diagnosis, "quarantined", f"quarantined (sample {culprit!r})")
        else:
            self.parts.sup.history.deaths_in_a_row += 1
            record(self.parts.sup, diagnosis, "respawned")
        self.stop(beside=worker_id)
        self.parts.ledger.clear()
        plan = Successor(
            self.parts.snapshot,
            self.parts.sup,
            False,
            self.respawns + 1,
            None,
            resume_point,
        )
        return HandOver(self.build_successor(plan))

    # --- growing back ---------------------------------------------------------------------
    def climb(self) -> HandOver | None:
        """Back up one rung of the back-off ladder when it is due (a successor with more
        workers), else None."""
        backoff = self.parts.sup.backoff
        if backoff is None or not backoff.climb_due(at_epoch_start=False):
            return None
        rung = backoff.rung_up()
        if rung is None:
            return None
        reason = f"{backoff.healthy_batches} batches without an environmental failure"
        self.parts.sup.step("up", rung[0], rung[1], reason)
        warnings.warn(
            f"loaderdoctor: {reason}; back up to num_workers={rung[0]}, prefetch_factor={rung[1]}",
            HealWarning,
            stacklevel=user_stacklevel(),
        )
        return self.hand_over(rung[0], rung[1])

    # --- replacing one worker ------------------------------------------------------------------
    def can_replace(self, worker_id: int | None) -> bool:
        """This pool can replace the dead worker ``worker_id`` alone now."""
        return (
            self.resume_point is None
            and worker_id is not None
            and self.pool is not None
            and self.phase is Phase.RUNNING  # torch's _reset counts its workers' resume replies
            and not self.parts.books.pin_memory  # its thread reads the result queue; ours must not race
            and not self.pool.is_alive(worker_id)
        )

    def replace_now(self, worker_id: int | None) -> Replacement | None:
        """Replace the dead worker ``worker_id`` alone where this pool can (None where not): a
        stream worker resumes its stream; any other loads the pool's own view of the dataset, as
        its siblings do (what was quarantined since the pool started it reads from the live
        table, whole: a quarantine the table cannot take rebuilds the pool instead)."""
        if not self.can_replace(worker_id):
            return None
        assert worker_id is not None
        if self.parts.streams is not None:
            return self._replace_stream_worker(worker_id)
        return self.replace(worker_id)

    def replace(self, worker_id: int, worker_init_fn: Any = None) -> Replacement:
        """Start a new process in place of the dead worker ``worker_id``; the others run on.

        First every complete batch is taken off the result queue into torch's reorder buffer,
        under the queue's writer lock: a worker killed while writing holds that lock for ever
        (and may have left half a message in the pipe); the replacement is then refused and the
        caller rebuilds the whole pool. ``worker_init_fn`` replaces the pool's own (a stream
        worker's resume). The owed batches are re-sent by
        ``resend_owed`` once the policy has decided (a probe may quarantine the sample in flight
        meanwhile).
        """
        assert self.pool is not None
        if self.queue_poisoned:
            return Replacement(
                worker_id,
                refused=(
                    f"worker {worker_id} died in the middle of sending a batch (half a message "
                    "is left in the shared result queue): the whole pool is rebuilt instead"
                ),
            )
        refused = self.settle_results(worker_id)
        if refused:
            return Replacement(worker_id, refused=refused)
        self.parts.recorder.reset_slot(worker_id)
        try:
            old_pid, new_pid = self.pool.respawn(
                worker_id,
                self.context,
                functools.partial(
                    self.parts.books.worker_loop_args,
                    worker_id,
                    worker_init_fn=worker_init_fn,
                ),
            )
        except Exception as error:  # the start itself failed: a fresh pool reports it
            return Replacement(
                worker_id,
                refused=(
                    f"worker {worker_id} could not be respawned alone ({type(error).__name__}: "
                    f"{error}): the whole pool is rebuilt instead"
                ),
            )
        if new_pid is not None:
            self.parts.sup.worker_replaced(new_pid)
        self.parts.books.worker_alive(worker_id)
        return Replacement(worker_id, old_pid, new_pid)

    def _replace_stream_worker(self, worker_id: int) -> Replacement:
        """Replace a dead stream worker alone: it resumes its own stream after the last batch
        the main process holds from it (delivered, or waiting in torch's reorder buffer)."""
        streams = self.parts.streams
        assert streams is not None
        refused = self.settle_results(worker_id)
        if refused:
            return Replacement(worker_id, refused=refused)
        self.parts.events.drain()  # every skip the dead worker wrote: its replay drops them too
        buffered = [
            data
            for worker, data in self.parts.books.buffered()
            if worker == worker_id and isinstance(data, StreamBatch)
        ]
        init = copy.copy(self.parts.books.worker_init_fn)
        init.stream_resumes = {worker_id: streams.resume_after(worker_id, buffered)}
        return self.replace(worker_id, worker_init_fn=init)

    def resend_owed(self, replacement: Replacement) -> str:
        """Send the replacement the batches its predecessor owed, in order; the evidence line.
        A sample quarantined meanwhile (the one in flight, just now) is left out by the worker
        (``live_quarantine``)."""
        assert self.pool is not None
        worker_id = replacement.worker_id
        # Only what this epoch owes: between two epochs of persistent workers torch's books still
        # hold the last epoch's unfinished tasks (an early ``break``), which its reset drops.
        owed = [
            task for task in self.parts.books.owed_by(worker_id) if self.parts.ledger.owes(task)
        ]
        index_queue = self.pool.index_queue(worker_id)
        for task in owed:
            index_queue.put((task, self.parts.ledger.indices_of(task)))
        self.parts.books.recount_tasks(worker_id)
        self.respawns += 1
        self.parts.sup.counts.resent_batches += len(owed)
        return (
            f"worker {worker_id} respawned alone (pid {replacement.old_pid} -> pid "
            f"{replacement.new_pid}); {len(owed)} owed batch{'' if len(owed) == 1 else 'es'} "
            "re-sent"
        )

    def settle_results(self, worker_id: int) -> str:
        """Move every complete batch on the result queue into torch's reorder buffer; "" when
        done, else why the whole pool must be rebuilt instead.

        Only while holding the writers' lock: then no message is half-written. Reading without
        it could start on the half message a worker killed mid-write left in the pipe and block
        for ever. The lock not had within ``RESULT_LOCK_WAIT_S`` means a worker died holding it
        (a healthy writer blocked on a full pipe ends up there too, safely).
        """
        lock = self.parts.books.result_queue_writer_lock()
        if lock is not None and not lock.acquire(timeout=RESULT_LOCK_WAIT_S):
            return (
                f"worker {worker_id} died while writing to the shared result queue (its lock "
                f"stayed held for {RESULT_LOCK_WAIT_S:.0f} s): the whole pool is rebuilt instead"
            )
        try:
            unreadable = self.parts.books.take_ready_results(MAX_SETTLED_RESULTS)
        finally:
            if lock is not None:
                lock.release()
        if unreadable:
            return (
                f"a batch on the shared result queue could not be read ({unreadable}): the whole "
                "pool is rebuilt instead"
            )
        return ""

    # --- rebuilding the pool ---------------------------------------------------------------------
    def hand_over(
        self, num_workers: int, prefetch_factor: int, plain: bool = False, handled: Any = None
    ) -> HandOver:
        """Stop this pool; a successor serves what is owed, then the rest of the epoch.
        ``handled``: the worker whose failure made the decision (any other found dead is told)."""
        owed = self.parts.ledger.owed_in_order()
        self.parts.sup.counts.resent_batches += len(owed)
        if self.parts.streams is not None:
            self.parts.events.drain()  # every skip the dead worker wrote: a replay drops them too
            # A worker whose end torch saw may still have batches waiting in torch's reorder
            # buffer (the end marker is read as it comes): its stream has not ended for the user.
            for worker_id, _ in self.parts.books.buffered():
                self.parts.streams.not_ended(worker_id)
        if self.resume_point is not None:
            resume_point = self.resume_point()  # before the stop: the state at the last delivery
            self.stop(beside=handled)
            self.parts.ledger.clear()
            snapshot = self.parts.snapshot.with_overrides(prefetch_factor=prefetch_factor)
            plan = Successor(snapshot, self.parts.sup, plain, self.respawns + 1, None, resume_point)
            return HandOver(self.build_successor(plan))
        remaining = self.parts.books.sampler_iter
        length = length_of(self.parts.books.index_sampler)
        self.stop(beside=handled)
        self.parts.ledger.clear()
        generator = torch.Generator()
        generator.set_state(self.generator_state)
        snapshot = self.parts.snapshot.with_overrides(
            **torch_compat.sampling_from(ResumeSampler(owed, remaining, length)),
            generator=generator,
            persistent_workers=False,
            num_workers=num_workers,
            prefetch_factor=prefetch_factor if num_workers else None,
        )
        if num_workers == 0:
            snapshot = snapshot.with_overrides(timeout=0)
        plan = Successor(snapshot, self.parts.sup, plain, self.respawns + 1, self.parts.streams)
        return HandOver(self.build_successor(plan))

    def stop(self, beside: Any = None) -> None:
        """Stop the pool. Healing (``beside``: the worker whose failure is handled), every other
        worker found dead then is planned for and settled too: its owed batches go to the
        successor, where a sample that killed it once may load fine, and its death would go
        unseen."""
        found: list[Evidence] = []
        if self.pool is not None:
            if beside is not None and not self.stopped:
                found = self._deaths_beside(beside)
            self.pool.stop(self.parts.books.workers_status)
        self.stopped = True
        self.parts.books.shut_down()
        for ev in found:
            assert self.plan_beside is not None
            self.carry(self.plan_beside(ev, beside))

    def _deaths_beside(self, handled: int) -> list[Evidence]:
        pool, watch = self.pool, self.parts.watch
        if pool is None or watch is None:
            return []
        busy = self.parts.books.workers_status
        return [
            watch.death(worker_id, self.parts.books.task_info)
            for worker_id in range(len(pool))
            if worker_id != handled
            and busy[worker_id]
            and not pool.is_alive(worker_id)
            and pool.how_it_ended(worker_id) != (None, 0)  # not a clean end of its work
        ]


__all__ = [
    "MAX_SETTLED_RESULTS",
    "RESULT_LOCK_WAIT_S",
    "TABLE_FULL_NOTE",
    "HandOver",
    "Move",
    "Outcome",
    "Plan",
    "PoolParts",
    "Raise",
    "Repair",
    "Replacement",
    "Resumed",
    "Successor",
    "delivered_batch",
    "follow_up",
    "record",
    "take_event",
    "take_events",
    "take_in_process_events",
]
