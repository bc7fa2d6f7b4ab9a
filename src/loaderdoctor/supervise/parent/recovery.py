"""What a supervised multiprocessing iterator does about a failed worker: the one place that acts.

``Recovery.handle(failure)`` diagnoses the failure, asks ``HealPolicy.decide`` what to do, carries
it out and returns what the iterator does next, as a value:

* ``Resumed``: the dead worker was replaced alone (a new process with its ``worker_id``, started as
  torch starts one, the batches it owed re-sent, in order); the other workers ran on;
* ``HandOver(successor)``: this pool is stopped and a new iterator (a rebuilt pool, a back-off, a
  stream resumed, plain torch) serves what was owed and then the rest of the epoch;
* ``Raise(error)``: the failure is the user's answer.

It reads and writes torch's bookkeeping only through ``torch_compat.IteratorBooks`` and starts
processes only through the ``Pool``; the probe (an isolated re-try) and the successor are built by
callables handed in, so that it holds no reference to the iterator class, and the iterator's books
hold the iterator weakly: no reference cycle. The result queue is settled under its writer lock
before a replacement starts, or found unusable (a worker killed mid-write) and the whole pool is
rebuilt instead.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import functools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from loaderdoctor import torch_compat
from loaderdoctor.forensics import Diagnosis, Evidence, diagnose
from loaderdoctor.forensics.reproduced import reproduced_alone
from loaderdoctor.forensics.rules import oom_ruled_out
from loaderdoctor.forensics.verdict_text import format_death_headline, format_verdict
from loaderdoctor.recorder import FlightRecorder
from loaderdoctor.supervise import sharing
from loaderdoctor.supervise.containment import cannot_resume_alone
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
)
from loaderdoctor.supervise.heal_policy import (
    POLICY,
    Action,
    ActionKind,
    Situation,
    holds_back,
    memory_suspect,
    replaces_one_worker,
)
from loaderdoctor.supervise.parent import hangs
from loaderdoctor.supervise.parent.collect import EventReader
from loaderdoctor.supervise.parent.ledger import Ledger
from loaderdoctor.supervise.parent.pool import Pool
from loaderdoctor.supervise.parent.supervision import LoaderSnapshot, Supervision
from loaderdoctor.supervise.parent.watch import PoolFailure, WorkerWatch
from loaderdoctor.supervise.samples import sample_file
from loaderdoctor.supervise.shared_failure import shared_by_the_workers
from loaderdoctor.supervise.streams import StreamBatch, StreamProgress
from loaderdoctor.supervise.worker.datasets import SupervisedBatchedMapDataset
from loaderdoctor.supervise.worker.loader_view import wrap_dataset

# How long a respawn waits for the result queue's writer lock before it calls the queue poisoned
# (held by a worker killed mid-write); a healthy writer holds it for one batch's write.
RESULT_LOCK_WAIT_S = 5.0
MAX_SETTLED_RESULTS = 100_000
TABLE_FULL_NOTE = (
    "the running workers' table of quarantined samples is full: the pool is rebuilt, and its new "
    "workers start knowing the whole quarantine"
)


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


class Phase(enum.Enum):
    RUNNING = "running"
    RESETTING = "resetting"  # torch's _reset waits for its workers' resume replies


class Recovery:
    """Acts on a failed worker of one pool; also keeps what the pool's workers know."""

    def __init__(
        self,
        books: torch_compat.IteratorBooks,
        snapshot: LoaderSnapshot,
        supervision: Supervision,
        ledger: Ledger,
        recorder: FlightRecorder,
        events: EventReader,
        *,
        streams: StreamProgress | None,
        respawns: int,
        context: Any,
        probe: Callable[..., Any],  # ``probe.probe_batch`` on a pool class
        successor: Callable[[Successor], Any],
        resume_point: Callable[[], Any] | None = None,
    ) -> None:
        self.books = books
        self.snapshot = snapshot
        self.sup = supervision
        self.ledger = ledger
        self.recorder = recorder
        self.events = events
        self.streams = streams
        self.respawns = respawns
        self.context = context
        self.probe_batch = probe
        self.build_successor = successor
        # Replayed by a successor so that its pool draws the same base seed as this one without
        # consuming the user's generator (which would shift every later epoch).
        self.generator_state = (snapshot.generator or torch.default_generator).get_state()
        # A loader whose own state records its pool (torchdata's StatefulDataLoader): a stopped
        # pool is resumed from that state (``resume_point()``, taken before the pool stops), never
        # with fewer workers, and one worker is never replaced alone (its worker loop is not
        # torch's).
        self.resume_point = resume_point
        self.pool: Pool | None = None  # once torch's __init__ started the workers
        self.watch: WorkerWatch | None = None
        self.stopped = False
        self.iterable = torch_compat.is_iterable(snapshot)
        self.phase = Phase.RUNNING
        self.queue_poisoned = False  # a worker died mid-write: the result queue is unusable
        # Workers whose dataset loads a whole batch with its own ``__getitems__`` (Hugging Face
        # ``datasets.Dataset``): their recorder names the batch in flight, not the sample.
        self.batched_workers: set[int] = set()

    # --- what the workers know ---------------------------------------------------------------
    def learns(self, dataset: Any) -> None:
        """The pool's workers load ``dataset`` (a view with the sample policy)."""
        batched = isinstance(dataset, SupervisedBatchedMapDataset)
        num_workers = self.snapshot.num_workers
        self.batched_workers = set(range(num_workers)) if batched else set()

    def watches(self, pool: Pool, watch: WorkerWatch | None = None) -> None:
        """torch's ``__init__`` started the workers: from now on ``pool`` owns them, and
        ``watch`` tells how one of them ended."""
        self.pool = pool
        self.watch = watch

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
        self.ledger.owe(task, indices)

    def new_epoch(self, streams: StreamProgress | None) -> None:
        self.ledger.clear()
        self.respawns = 0  # counted per epoch, as for a fresh iterator
        self.streams = streams

    # --- the failure ---------------------------------------------------------------------------
    def handle(self, failure: PoolFailure) -> Outcome:
        """Decide about a failure, then carry the decision out."""
        ev = failure.evidence
        found_alone = False
        batch_died_before = False
        # (a stream's items cannot be loaded alone: its culprit is re-tried when it resumes)
        if ev.kind == "death" and ev.stage == "collate" and ev.batch_indices and not self.iterable:
            batch_died_before = self.sup.collate_death(ev.batch_indices)
            found_alone = self._name_in_batch(ev, collating=True)
        elif ev.kind == "death" and ev.stage == "fetch" and ev.worker_id in self.batched_workers:
            found_alone = self._name_in_batch(ev)
        diagnosis = failure.diagnosis or diagnose(ev)
        at = self._situation(ev, found_alone)
        if batch_died_before:
            at = replace(at, batch_died_in_collate_before=True)
        action = POLICY.decide(diagnosis, at)
        # Start the dead worker's replacement now, so that its start-up overlaps the probe (a
        # sample quarantined meanwhile reaches it as every live worker: ``live_quarantine``).
        replacement = None
        if (
            ev.worker_id is not None
            and self.streams is None  # a stream's resume waits for the culprit's position
            and not (action.kind is ActionKind.PROBE and memory_suspect(diagnosis))
            and self.can_replace(action, at, ev)
        ):
            replacement = self.replace(ev.worker_id, dataset=self.current_dataset())
        if action.kind is ActionKind.PROBE:
            if action.pool_stopped:
                self.stop(beside=ev.worker_id)  # nothing the pool holds contends with the re-try
            action = self._probe(diagnosis, at, ev.in_flight_index)
        self._count_death(at, action)
        if self.sup.backoff is not None and holds_back(diagnosis, at):
            self.sup.backoff.failed()
        if action.kind is ActionKind.RAISE:
            if action.shared:
                diagnosis = shared_by_the_workers(diagnosis, action.note)
            elif action.note:
                diagnosis.evidence.append(action.note)
            stopped = action.note if action.stops_healing else None
            return self._raise(failure, diagnosis, stopped_because=stopped)
        # a stream handed to plain torch resumes nothing: its culprit is not re-tried
        resumes = self.streams is not None and action.kind is not ActionKind.FALL_BACK
        stream = self._stream_culprit(ev, diagnosis) if resumes else None
        return self._heal(diagnosis, action, at, ev, replacement, stream)

    def restart(self, failure: PoolFailure, start_state: Any) -> Outcome:
        """A worker failed while the pool was being built (torchdata's ``__init__`` waits for
        its workers to start): nothing was delivered, so with healing a new pool starts over
        from the state this one was given (``start_state``; None: the epoch's start)."""
        ev = failure.evidence
        diagnosis = failure.diagnosis or diagnose(ev)
        at = self._situation(ev, found_alone=False)
        action = POLICY.decide(diagnosis, at)
        if action.kind not in (ActionKind.RESPAWN, ActionKind.BACK_OFF) or ev.kind != "death":
            return self.give_up(failure)
        self._count_death(at, action)
        diagnosis.evidence.append(
            f"worker {ev.worker_id} died while the pool started: a new pool starts over"
        )
        self.sup.record(diagnosis, "respawned")
        warn_healed(diagnosis.title, diagnosis.cause, "respawned")
        self.stop(beside=ev.worker_id)
        self.ledger.clear()
        plan = Successor(
            self.snapshot, self.sup, False, self.respawns + 1, None, (start_state, None, None)
        )
        return HandOver(self.build_successor(plan))

    def idle_death(self) -> bool:
        """Before a persistent pool of a loader that resumes from its own state starts another
        epoch: True when one of its workers died while the pool sat idle (recorded, and with
        healing said in a ``HealWarning``; without healing raised): the loader then starts a new
        pool for the epoch, as torchdata's own reset would wait for the dead worker for ever."""
        pool, watch = self.pool, self.watch
        if pool is None or watch is None:
            return False
        dead = [w for w in range(len(pool)) if not pool.is_alive(w)]
        if not dead:
            return False
        failure = PoolFailure(watch.death(dead[0], {}))
        if not self.sup.settings.heal:
            outcome = self._raise(failure, failure.diagnosis or diagnose(failure.evidence))
            error, outcome.error = outcome.error, None
            assert error is not None
            try:
                raise error
            finally:
                error = None
        diagnosis = diagnose(failure.evidence)
        diagnosis.evidence.append(
            f"worker {dead[0]} died while the pool sat idle between epochs: a new pool starts "
            "the next epoch"
        )
        self.sup.record(diagnosis, "respawned")
        warn_healed(diagnosis.title, diagnosis.cause, "respawned")
        return True

    def _count_death(self, at: Situation, action: Action) -> None:
        """A death or hang that blamed no sample counts toward ``max_deaths_in_a_row``; one whose
        sample is quarantined is the sample's (``max_skipped`` bounds those)."""
        if at.kind in ("death", "hang") and action.kind is not ActionKind.QUARANTINE:
            self.sup.history.deaths_in_a_row += 1

    def give_up(self, failure: PoolFailure) -> Raise:
        """Raise the failure with its verdict, healing or not: a pool that failed while its
        iterator was still being built has nothing to resume from."""
        return self._raise(failure, failure.diagnosis or diagnose(failure.evidence))

    def _situation(self, ev: Evidence, found_alone: bool) -> Situation:
        sup = self.sup
        at = Situation(
            heal=sup.settings.heal,
            iterable=self.iterable,
            deaths_in_a_row=sup.history.deaths_in_a_row,
            max_deaths_in_a_row=sup.settings.max_deaths_in_a_row,
            oom_ruled_out=oom_ruled_out(ev),
            num_workers=self.books.num_workers,
            prefetch_factor=self.books.prefetch_factor,
            kind=ev.kind,
            stage=ev.stage,
            reached_worker_init=ev.reached_worker_init,
            culprit=ev.in_flight_index,
            culprit_quarantined=_quarantined(ev.in_flight_index, sup.quarantine),
            in_process_allowed=sup.settings.allow_in_process,
            workers_fixed=self.resume_point is not None,
            resumes_exactly=self.resume_point is None or bool(self.snapshot.in_order),
            sharing_strategy=sharing.current(),
            isolated_probe=True,
            loaded_fine_alone_before=sup.history.loaded_fine_alone,
            not_resumable=cannot_resume_alone(sup.dataset),
            stream_delivered=self.streams is not None and self.streams.any_delivered(),
        )
        if self.iterable:
            at = replace(at, culprit=ev.iterable_position)
        if found_alone:  # re-tried alone already, and it killed its worker again
            at = replace(at, probe_failed_again=True)
        return at

    def _name_in_batch(self, ev: Evidence, collating: bool = False) -> bool:
        """A worker died while it handled a whole batch: inside the dataset's own
        ``__getitems__``, which loads the batch at once (its recorder holds the batch's first
        index, not the sample that killed it: 111 was named when 37 crashed), or inside
        ``collate_fn`` (``collating``: every sample of the batch was loaded). Re-try the batch's
        samples one by one in a fresh worker (each collated alone, for a death in collate_fn):
        the one that kills it again is the culprit (True); else the evidence says "one of" the
        batch, and no sample is named."""
        batch = list(ev.batch_indices or [ev.in_flight_index])
        ev.in_flight_index = ev.sample_file = None
        shown = ", ".join(repr(i) for i in batch[:16]) + (", …" if len(batch) > 16 else "")
        if collating:
            head = f"the worker died in collate_fn, collating the batch [{shown}]"
            alone = "each collated fine alone in a fresh worker"
        else:
            head = (
                "the dataset's own __getitems__ loads a batch at once, so the sample in flight "
                f"was one of [{shown}]"
            )
            alone = "each loaded fine alone in a fresh worker"
        if len(batch) == 1:  # (a probe's own batches are of one: it never probes again)
            ev.in_flight_index = batch[0]
            ev.notes.append(head)
            return False
        outcome = self.probe_batch(self.snapshot, batch, collate=collating)
        if isinstance(outcome, str):
            self.sup.counts.probe_failures += 1
            ev.notes.append(f"{head}; re-trying them alone failed ({outcome})")
        elif outcome is None:
            ev.notes.append(f"{head}; {alone}")
        else:
            ev.in_flight_index = outcome
            ev.sample_file = sample_file(self.snapshot.dataset, outcome)
            ev.notes.append(
                f"{head}; re-tried one by one in a fresh worker, sample {outcome!r} killed it again"
            )
            return True
        return False

    def _probe(self, diagnosis: Diagnosis, at: Situation, culprit: Any) -> Action:
        """Re-try the sample in flight alone, then decide again on what that showed.

        A string from the probe says why it could not tell (its worker could not start, or
        loaderdoctor's own machinery failed): never taken for the sample's failure, which would
        quarantine a healthy sample."""
        found = self.probe_batch(self.snapshot, [culprit], collate=at.stage == "collate")
        if isinstance(found, str):  # the probe could not tell: never the sample's failure
            self.sup.counts.probe_failures += 1
            return POLICY.decide(diagnosis, replace(at, probe_error=found))
        failed_again = found is not None
        self.sup.history.loaded_fine_alone += not failed_again
        action = POLICY.decide(diagnosis, replace(at, probe_failed_again=failed_again))
        if failed_again and action.kind is ActionKind.QUARANTINE:
            control = self._control(diagnosis, at, culprit)
            if control is not None:
                return control
            reproduced_alone(diagnosis, culprit)  # its first evidence line says what the note did
            action = replace(action, note="")
        return action

    def _control(self, diagnosis: Diagnosis, at: Situation, culprit: Any) -> Action | None:
        """Before a sample is blamed: a sample delivered earlier in this run, re-tried alone the
        same way (a fresh worker, the same start method and timeout). Failing too, it shows the
        failure is what the workers share (a lock held at fork, a leaked semaphore, a handle the
        dataset opened in the main process, the machine): healing stops, nothing quarantined
        (the returned action). Loading fine, it clears the rest: said in the evidence (None)."""
        control = self.sup.control_sample(culprit)
        if control is None:
            diagnosis.evidence.append(
                "no control: no sample was delivered whole before this one, to re-try the same "
                "way and clear the rest"
            )
            return None
        outcome = self.probe_batch(self.snapshot, [control], collate=at.stage == "collate")
        if isinstance(outcome, str):
            self.sup.counts.probe_failures += 1
            diagnosis.evidence.append(
                f"control: sample {control!r}, delivered earlier, could not be re-tried ({outcome})"
            )
            return None
        if outcome is None:
            diagnosis.evidence.append(
                f"control: sample {control!r}, delivered earlier, loaded fine alone the same way"
            )
            return None
        return Action(
            ActionKind.RAISE,
            at.num_workers,
            at.prefetch_factor,
            f"healing stopped: sample {culprit!r} failed again alone in a fresh worker, and so "
            f"did sample {control!r}, delivered earlier in this run, re-tried the same way (the "
            "control): the failure is not the sample's but what the workers share (state "
            "inherited from the main process, a lock or semaphore a killed worker held, the "
            "machine); nothing is quarantined",
            stops_healing=True,
            shared=True,
        )

    def _raise(
        self, failure: PoolFailure, diagnosis: Diagnosis, stopped_because: str | None = None
    ) -> Raise:
        """Raise the failure with its verdict; ``stopped_because``: healing stopped at a limit
        or a control (a ``HealingStoppedError`` whose first line says why)."""
        self.sup.record(diagnosis, "raised")
        error, failure.error = failure.error, None
        if error is not None:
            if diagnosis.cause == "internal-error":
                attach(error, diagnosis)
                error.add_note(format_verdict(diagnosis, include_stack=False))
            return Raise(error)
        # torch's own first line (for a user's timeout: torch's timeout message)
        headline = next(
            (n for n in failure.evidence.notes if n.startswith(hangs.TIMEOUT_PREFIX)),
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

    def _heal(
        self,
        diagnosis: Diagnosis,
        action: Action,
        at: Situation,
        ev: Evidence,
        replacement: Replacement | None,
        stream: tuple[str, str] | None = None,
    ) -> Outcome:
        sup = self.sup
        culprit = ev.in_flight_index if stream is None else None  # a stream's is named apart
        if action.note:
            diagnosis.evidence.append(action.note)
        detail = f" (sample {culprit!r})" if culprit is not None else ""
        recorded_as = action.kind.value
        if stream is not None:  # a stream's culprit: (how it was recorded, what the warning says)
            recorded_as, detail = stream
        told = action.kind is not ActionKind.QUARANTINE or self._quarantine(culprit, diagnosis)
        if action.kind is ActionKind.BACK_OFF:
            diagnosis.evidence.append(
                f"continuing with num_workers={action.num_workers}, "
                f"prefetch={action.prefetch_factor}"
            )
            sup.step("down", action.num_workers, action.prefetch_factor, diagnosis.cause)
            detail = (
                f" (num_workers={action.num_workers}, prefetch_factor={action.prefetch_factor})"
            )
        elif action.kind is ActionKind.FALL_BACK:
            diagnosis.evidence.append(
                "plain torch loading takes over for the rest of this loader's life"
            )
            sup.falls_back_to_plain_torch()
        if action.sharing_strategy is not None:
            sup.worker_sharing_strategy = sharing.switch_to(action.sharing_strategy)
        alone = told and self._respawned_alone(diagnosis, action, at, ev, replacement)
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
            warn_healed(diagnosis.title, diagnosis.cause, f"{recorded_as}{detail}")
        if alone:
            return Resumed()
        return self.hand_over(
            action.num_workers,
            action.prefetch_factor,
            plain=action.kind is ActionKind.FALL_BACK,
            handled=ev.worker_id,
        )

    def _quarantine(self, index: Any, diagnosis: Diagnosis) -> bool:
        """Quarantine ``index``; False when the running workers cannot be told (a new pool's
        workers start knowing it)."""
        if self.sup.quarantine_add(index, diagnosis):
            return True
        diagnosis.evidence.append(TABLE_FULL_NOTE)
        return False

    def _respawned_alone(
        self,
        diagnosis: Diagnosis,
        action: Action,
        at: Situation,
        ev: Evidence,
        replacement: Replacement | None,
    ) -> bool:
        """Finish replacing the failed worker alone (True), or say why the pool is rebuilt."""
        late = replacement is None and (self.streams is not None or memory_suspect(diagnosis))
        if late and ev.worker_id is not None and self.can_replace(action, at, ev):
            if self.streams is not None:
                replacement = self._replace_stream_worker(ev.worker_id)
            else:
                replacement = self.replace(ev.worker_id, dataset=self.current_dataset())
        if replacement is not None and replacement.refused:
            diagnosis.evidence.append(replacement.refused)
            return False
        if replacement is None or not replaces_one_worker(action, at):
            return False  # a back-off: the replacement stops with the pool
        diagnosis.evidence.append(self.resend_owed(replacement))
        return True

    def climb(self) -> HandOver | None:
        """Back up one rung of the back-off ladder when it is due (a successor with more
        workers), else None."""
        backoff = self.sup.backoff
        if backoff is None or not backoff.climb_due(at_epoch_start=False):
            return None
        rung = backoff.rung_up()
        if rung is None:
            return None
        reason = f"{backoff.healthy_batches} batches without an environmental failure"
        self.sup.step("up", rung[0], rung[1], reason)
        warnings.warn(
            f"loaderdoctor: {reason}; back up to num_workers={rung[0]}, prefetch_factor={rung[1]}",
            HealWarning,
            stacklevel=user_stacklevel(),
        )
        return self.hand_over(rung[0], rung[1])

    # --- replacing one worker ------------------------------------------------------------------
    def can_replace(self, action: Action, at: Situation, ev: Evidence) -> bool:
        """The policy replaces one worker, and this pool can do it now."""
        return (
            replaces_one_worker(action, at)
            and self.resume_point is None
            and ev.worker_id is not None
            and self.pool is not None
            and self.phase is Phase.RUNNING  # torch's _reset counts its workers' resume replies
            and not self.books.pin_memory  # its thread reads the result queue; ours must not race
            and not self.pool.is_alive(ev.worker_id)
        )

    def current_dataset(self) -> Any:
        """The user's dataset wrapped with the sample policy as it is now (the quarantine)."""
        policy = self.sup.sample_policy(self.books.drop_last)
        return wrap_dataset(self.snapshot.dataset, torch_compat.dataset_kind(self.snapshot), policy)

    def replace(
        self, worker_id: int, worker_init_fn: Any = None, dataset: Any = None
    ) -> Replacement:
        """Start a new process in place of the dead worker ``worker_id``; the others run on.

        First every complete batch is taken off the result queue into torch's reorder buffer,
        under the queue's writer lock: a worker killed while writing holds that lock for ever
        (and may have left half a message in the pipe); the replacement is then refused and the
        caller rebuilds the whole pool. ``worker_init_fn`` or ``dataset`` replace the pool's own
        (a per-worker resume, a grown quarantine). The owed batches are re-sent by
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
        self.recorder.reset_slot(worker_id)
        try:
            old_pid, new_pid = self.pool.respawn(
                worker_id,
                self.context,
                functools.partial(
                    self.books.worker_loop_args,
                    worker_id,
                    dataset=dataset,
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
            self.sup.workers_started({new_pid})
        self.books.worker_alive(worker_id)
        if dataset is not None:  # a new view: does its recorder name the sample or the batch?
            if isinstance(dataset, SupervisedBatchedMapDataset):
                self.batched_workers.add(worker_id)
            else:
                self.batched_workers.discard(worker_id)
        return Replacement(worker_id, old_pid, new_pid)

    def _replace_stream_worker(self, worker_id: int) -> Replacement:
        """Replace a dead stream worker alone: it resumes its own stream after the last batch
        the main process holds from it (delivered, or waiting in torch's reorder buffer)."""
        streams = self.streams
        assert streams is not None
        refused = self.settle_results(worker_id)
        if refused:
            return Replacement(worker_id, refused=refused)
        self.events.drain()  # every skip the dead worker wrote: its replay drops them too
        buffered = [
            data
            for worker, data in self.books.buffered()
            if worker == worker_id and isinstance(data, StreamBatch)
        ]
        init = copy.copy(self.books.worker_init_fn)
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
        owed = [task for task in self.books.owed_by(worker_id) if self.ledger.owes(task)]
        index_queue = self.pool.index_queue(worker_id)
        for task in owed:
            index_queue.put((task, self.ledger.indices_of(task)))
        self.books.recount_tasks(worker_id)
        self.respawns += 1
        self.sup.counts.resent_batches += len(owed)
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
        lock = self.books.result_queue_writer_lock()
        if lock is not None and not lock.acquire(timeout=RESULT_LOCK_WAIT_S):
            return (
                f"worker {worker_id} died while writing to the shared result queue (its lock "
                f"stayed held for {RESULT_LOCK_WAIT_S:.0f} s): the whole pool is rebuilt instead"
            )
        try:
            unreadable = self.books.take_ready_results(MAX_SETTLED_RESULTS)
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
        owed = self.ledger.owed_in_order()
        self.sup.counts.resent_batches += len(owed)
        if self.streams is not None:
            self.events.drain()  # every skip the dead worker wrote: a replay drops them too
            # A worker whose end torch saw may still have batches waiting in torch's reorder
            # buffer (the end marker is read as it comes): its stream has not ended for the user.
            for worker_id, _ in self.books.buffered():
                self.streams.not_ended(worker_id)
        if self.resume_point is not None:
            resume_point = self.resume_point()  # before the stop: the state at the last delivery
            self.stop(beside=handled)
            self.ledger.clear()
            snapshot = self.snapshot.with_overrides(prefetch_factor=prefetch_factor)
            plan = Successor(snapshot, self.sup, plain, self.respawns + 1, None, resume_point)
            return HandOver(self.build_successor(plan))
        remaining = self.books.sampler_iter
        length = length_of(self.books.index_sampler)
        self.stop(beside=handled)
        self.ledger.clear()
        generator = torch.Generator()
        generator.set_state(self.generator_state)
        snapshot = self.snapshot.with_overrides(
            **torch_compat.sampling_from(ResumeSampler(owed, remaining, length)),
            generator=generator,
            persistent_workers=False,
            num_workers=num_workers,
            prefetch_factor=prefetch_factor if num_workers else None,
        )
        if num_workers == 0:
            snapshot = snapshot.with_overrides(timeout=0)
        plan = Successor(snapshot, self.sup, plain, self.respawns + 1, self.streams)
        return HandOver(self.build_successor(plan))

    def stop(self, beside: Any = None) -> None:
        """Stop the pool. Healing (``beside``: the worker whose failure is handled), every other
        worker found dead then is handled too: its owed batches go to the successor, where a
        sample that killed it once may load fine, and its death would go unseen."""
        found: list[Evidence] = []
        if self.pool is not None:
            if beside is not None and not self.stopped:
                found = self._deaths_beside(beside)
            self.pool.stop(self.books.workers_status)
        self.stopped = True
        self.books.shut_down()
        for ev in found:
            self._handle_beside(ev, beside)

    def _deaths_beside(self, handled: int) -> list[Evidence]:
        pool, watch = self.pool, self.watch
        if pool is None or watch is None:
            return []
        busy = self.books.workers_status
        return [
            watch.death(worker_id, self.books.task_info)
            for worker_id in range(len(pool))
            if worker_id != handled
            and busy[worker_id]
            and not pool.is_alive(worker_id)
            and pool.how_it_ended(worker_id) != (None, 0)  # not a clean end of its work
        ]

    def _handle_beside(self, ev: Evidence, handled: int) -> None:
        """A worker that died while another's failure was handled: its sample in flight is
        re-tried alone and quarantined as any other would be; its batches go with the rest."""
        diagnosis = diagnose(ev)
        at = self._situation(ev, found_alone=False)
        action = POLICY.decide(diagnosis, at)
        if action.kind is ActionKind.PROBE and ev.in_flight_index is not None:
            action = self._probe(diagnosis, at, ev.in_flight_index)
        recorded_as = "respawned"
        if action.kind is ActionKind.QUARANTINE and not self.iterable:
            self._quarantine(ev.in_flight_index, diagnosis)  # a new pool follows: it knows
            recorded_as = "quarantined"
        diagnosis.evidence.append(
            f"worker {ev.worker_id} died while the pool was stopped for worker {handled}'s "
            "failure: its owed batches are re-sent with the others'"
        )
        self.sup.record(diagnosis, recorded_as)
        detail = f" (sample {ev.in_flight_index!r})" if ev.in_flight_index is not None else ""
        warn_healed(diagnosis.title, diagnosis.cause, f"{recorded_as}{detail}")

    # --- streams (IterableDataset) ----------------------------------------------------------------
    def _stream_culprit(self, ev: Evidence, diagnosis: Diagnosis) -> tuple[str, str]:
        """The item in flight at a death is re-tried once when the stream resumes, as a
        map-style sample is; one that kills its worker again ends that worker's stream just
        before it (a generator cannot be read past it): (action, detail)."""
        streams = self.streams
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
        self.sup.counts.skipped += 1
        lost = f"worker {worker}'s items from #{position} on are lost"
        diagnosis.evidence.append(
            f"worker {worker} died at its item #{position} again: its stream cannot be read past "
            f"it, so {lost}; its items before #{position} arrive (the other workers resume)"
        )
        return "lost", f" ({named}; {lost})"


def _quarantined(index: Any, quarantine: Any) -> bool:
    try:
        return index is not None and index in quarantine
    except TypeError:  # an unhashable index
        return False


__all__ = [
    "MAX_SETTLED_RESULTS",
    "RESULT_LOCK_WAIT_S",
    "TABLE_FULL_NOTE",
    "HandOver",
    "Outcome",
    "Raise",
    "Recovery",
    "Replacement",
    "Resumed",
    "Successor",
]
