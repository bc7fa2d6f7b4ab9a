"""What a supervised multiprocessing iterator does about a failed worker: decided once, as a value.

``Recovery.plan(failure)`` names the sample where the worker died on a whole batch, diagnoses the
failure and asks the policy once (``HealPolicy.plan``: the re-try alone it needs, and its
control, are made through a ``controls.Retrier``); the answer becomes a ``Plan`` (replace one
worker, rebuild the pool with N workers and a prefetch, fall back to plain torch, raise), with the
incident's action and detail.
Its ``Repair`` carries the plan out and writes the incident (``repair``); ``handle`` does both.
What the iterator does next is a value: ``Resumed``, ``HandOver(successor)`` or ``Raise(error)``.
A death found while the pool stops for another's failure is planned and carried out the same way.
The path of one worker death through planner, policy and executor: docs/failure-path.md.

The probe (an isolated re-try) is a callable handed in, so that it holds no reference to the
iterator class, and the books hold the iterator weakly: no reference cycle.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from loaderdoctor.forensics import Diagnosis, Evidence, diagnose
from loaderdoctor.forensics.reproduced import reproduced_alone
from loaderdoctor.forensics.rules import oom_ruled_out
from loaderdoctor.supervise import sharing
from loaderdoctor.supervise.containment import COORDINATED_STREAMS, listed
from loaderdoctor.supervise.heal_policy import (
    POLICY,
    ActionKind,
    Decision,
    Situation,
)
from loaderdoctor.supervise.parent.controls import Retrier, in_quarantine
from loaderdoctor.supervise.parent.repair import (
    MAX_SETTLED_RESULTS,
    RESULT_LOCK_WAIT_S,
    TABLE_FULL_NOTE,
    HandOver,
    Move,
    Outcome,
    Plan,
    PoolParts,
    Raise,
    Repair,
    Replacement,
    Resumed,
    Successor,
    record,
)
from loaderdoctor.supervise.parent.watch import PoolFailure
from loaderdoctor.supervise.samples import sample_file
from loaderdoctor.supervise.shared_failure import (
    inherited_state,
    shared_by_the_workers,
    suspect_inherited,
)


class Recovery:
    """Plans what to do about a failed worker of one pool; its ``repair`` carries it out."""

    def __init__(
        self,
        parts: PoolParts,
        *,
        respawns: int,
        context: Any,
        probe: Callable[..., Any],  # ``probe.probe_batch`` on a pool class
        successor: Callable[[Successor], Any],
        resume_point: Callable[[], Any] | None = None,
    ) -> None:
        self.parts = parts
        self.probe_batch = probe
        self.repair = Repair(
            parts,
            respawns=respawns,
            context=context,
            successor=successor,
            resume_point=resume_point,
        )
        # The repair reaches back for a death found while stopping, weakly: no reference cycle
        self.repair.plan_beside = _weakly(weakref.WeakMethod(self.plan_beside))

    # --- the failure ---------------------------------------------------------------------------
    def handle(self, failure: PoolFailure) -> Outcome:
        """Decide about a failure (unless it was decided already), then carry it out."""
        plan = failure.plan if isinstance(failure.plan, Plan) else self.plan(failure)
        return self.repair.carry(plan)

    def plan(self, failure: PoolFailure, received: bool = False) -> Plan:
        """What to do about ``failure``, with one consultation of the policy; ``received``: a
        worker's exception in its batch's place (raised, or healed once its batch is owed)."""
        ev = failure.evidence
        found_alone = False
        batch_died_before = False
        # (a stream's items cannot be loaded alone: its culprit is re-tried when it resumes)
        if (
            ev.kind == "death"
            and ev.stage == "collate"
            and ev.batch_indices
            and not self.parts.iterable
        ):
            batch_died_before = self.parts.sup.collate_death(ev.batch_indices)
            found_alone = self._name_in_batch(ev, collating=True)
        elif ev.kind == "death" and ev.stage == "fetch" and self.repair.batched:
            found_alone = self._name_in_batch(ev)
        diagnosis = failure.diagnosis or diagnose(ev)
        at = self._situation(ev, found_alone)
        at = replace(at, batch_died_in_collate_before=batch_died_before, received=received)
        retrier = self._retrier(diagnosis, ev.worker_id, stopping=False)
        decision = POLICY.plan(diagnosis, at, retrier)
        if decision.reproduced:  # its first evidence line says what the policy's note did
            reproduced_alone(diagnosis, at.culprit)
        action = decision.action
        plan = Plan(
            Move.RAISE,
            diagnosis,
            action,
            "raised",
            worker_id=ev.worker_id,
            replacement=retrier.replacement,
            replace_early=decision.replace_early and not retrier.asked,
            replace_late=decision.replace_late,
            counts_death=decision.counts_death,
            holds_back=decision.holds_back,
        )
        if action.kind is ActionKind.QUARANTINE and ev.kind in ("death", "hang"):
            shared = self.parts.sup.blamed_for_a_death(ev.in_flight_index, diagnosis)
            if shared is not None:  # sample after sample dies alike: not theirs
                plan.diagnosis, plan.failure = shared, failure
                plan.stopped_because = "stopped healing"
                return plan
        if action.kind is ActionKind.RAISE:
            if action.shared:
                inherited = inherited_state(self.parts.sup.dataset)
                plan.diagnosis = shared_by_the_workers(diagnosis, action.note, inherited)
            else:  # no control cleared the sample: what its workers inherit is named beside it
                self._raised_alone(diagnosis, action.note)
            plan.failure = failure
            plan.stopped_because = action.note if action.stops_healing else None
            return plan
        # a stream handed to plain torch resumes nothing: its culprit is not re-tried
        resumes = self.parts.streams is not None and action.kind is not ActionKind.FALL_BACK
        stream = self._stream_culprit(ev, plan) if resumes else None
        return self._healing(plan, decision, ev.in_flight_index if stream is None else None, stream)

    def _retrier(self, diagnosis: Diagnosis, worker_id: int | None, stopping: bool) -> Retrier:
        """What makes the re-tries alone the policy asks for (``stopping``: a death found while
        the pool stops: no replacement first, no second stop)."""
        return Retrier(self.parts, self.repair, self.probe_batch, diagnosis, worker_id, stopping)

    def _raised_alone(self, diagnosis: Diagnosis, note: str | None) -> None:
        diagnosis.evidence.extend([note] if note else [])
        suspect_inherited(diagnosis, inherited_state(self.parts.sup.dataset))

    def _healing(
        self, plan: Plan, decision: Decision, culprit: Any, stream: tuple[str, str] | None
    ) -> Plan:
        """The plan of a failure healed: its move, its evidence and the incident's action and
        detail (a stream's culprit is named apart: ``stream``)."""
        action, diagnosis = decision.action, plan.diagnosis
        if action.note:
            diagnosis.evidence.append(action.note)
        plan.record_as = action.kind.value
        plan.detail = f" (sample {culprit!r})" if culprit is not None else ""
        if stream is not None:  # (how it was recorded, what the warning says)
            plan.record_as, plan.detail = stream
        plan.culprit = culprit
        plan.quarantine = action.kind is ActionKind.QUARANTINE
        plan.move = Move.REPLACE if decision.alone else Move.REBUILD
        if action.kind is ActionKind.BACK_OFF:
            diagnosis.evidence.append(
                f"continuing with num_workers={action.num_workers}, "
                f"prefetch={action.prefetch_factor}"
            )
            plan.detail = (
                f" (num_workers={action.num_workers}, prefetch_factor={action.prefetch_factor})"
            )
        elif action.kind is ActionKind.FALL_BACK:
            diagnosis.evidence.append(
                "plain torch loading takes over for the rest of this loader's life"
            )
            plan.move = Move.FALL_BACK
        return plan

    def plan_beside(self, ev: Evidence, handled: int) -> Plan:
        """A worker that died while another's failure was handled: its sample in flight is
        re-tried alone and quarantined as any other would be; its batches go with the rest."""
        diagnosis = diagnose(ev)
        at = self._situation(ev, found_alone=False)
        retrier = self._retrier(diagnosis, ev.worker_id, stopping=True)
        decision = POLICY.plan(diagnosis, at, retrier)
        if decision.reproduced:
            reproduced_alone(diagnosis, at.culprit)
        quarantine = decision.action.kind is ActionKind.QUARANTINE and not self.parts.iterable
        index = ev.in_flight_index
        if quarantine and self.parts.sup.blamed_for_a_death(index, diagnosis):
            quarantine = False  # sample after sample dies alike: the next failure raises it
        return Plan(
            Move.SETTLE,
            diagnosis,
            decision.action,
            "quarantined" if quarantine else "respawned",
            f" (sample {index!r})" if index is not None else "",
            worker_id=ev.worker_id,
            culprit=index,
            quarantine=quarantine,
            handled=handled,
        )

    def restart(self, failure: PoolFailure, restart: Callable[[], Any]) -> Outcome:
        """A worker failed while the pool was being built (torchdata's ``__init__`` waits for
        its workers to start, its reset for their resume replies): nothing was delivered, so
        with healing a new pool starts over from ``restart()``'s resume point."""
        ev = failure.evidence
        if ev.kind not in ("death", "hang"):  # (the deaths limit counts only these)
            return self.give_up(failure)
        diagnosis = failure.diagnosis or diagnose(ev)
        at = self._situation(ev, found_alone=False)
        # a sample in flight (torchdata's __init__ re-reads the batches since its snapshot) is
        # re-tried alone first, as one found while a pool stops is
        retrier = self._retrier(diagnosis, ev.worker_id, stopping=True)
        decision = POLICY.plan(diagnosis, at, retrier)
        action = decision.action
        if action.stops_healing:  # pools that die as they start, past the deaths limit
            self._raised_alone(diagnosis, action.note)
            return self.repair.raise_failure(failure, diagnosis, action.note)
        quarantine = action.kind is ActionKind.QUARANTINE and not self.parts.iterable
        if not quarantine and action.kind not in (ActionKind.RESPAWN, ActionKind.BACK_OFF):
            return self.give_up(failure)
        if decision.reproduced:
            reproduced_alone(diagnosis, at.culprit)
        diagnosis.evidence.append(
            f"worker {ev.worker_id} {'died' if ev.kind == 'death' else 'got stuck'} while the "
            "pool started: a new pool starts over"
        )
        culprit = at.culprit if quarantine else None
        return self.repair.start_over(diagnosis, ev.worker_id, restart(), culprit)

    def idle_death(self) -> bool:
        """Before a persistent pool of a loader that resumes from its own state starts another
        epoch: True when one of its workers died while the pool sat idle (recorded, and with
        healing said in a ``HealWarning``; without healing raised): the loader then starts a new
        pool for the epoch, as torchdata's own reset would wait for the dead worker for ever."""
        pool, watch = self.repair.pool, self.parts.watch
        if pool is None or watch is None:
            return False
        dead = [w for w in range(len(pool)) if not pool.is_alive(w)]
        if not dead:
            return False
        failure = PoolFailure(watch.death(dead[0], {}))
        if not self.parts.sup.settings.heal:
            outcome = self.give_up(failure)
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
        record(self.parts.sup, diagnosis, "respawned")
        return True

    def give_up(self, failure: PoolFailure) -> Raise:
        """Raise the failure with its verdict, healing or not: a pool that failed while its
        iterator was still being built has nothing to resume from."""
        return self.repair.raise_failure(failure, failure.diagnosis or diagnose(failure.evidence))

    def _situation(self, ev: Evidence, found_alone: bool) -> Situation:
        sup = self.parts.sup
        at = Situation(
            heal=sup.settings.heal,
            iterable=self.parts.iterable,
            deaths_in_a_row=sup.history.deaths_in_a_row,
            max_deaths_in_a_row=sup.settings.max_deaths_in_a_row,
            oom_ruled_out=oom_ruled_out(ev),
            num_workers=self.parts.books.num_workers,
            prefetch_factor=self.parts.books.prefetch_factor,
            kind=ev.kind,
            stage=ev.stage,
            reached_worker_init=ev.reached_worker_init,
            culprit=ev.in_flight_index,
            culprit_quarantined=in_quarantine(ev.in_flight_index, sup.quarantine),
            in_process_allowed=sup.settings.allow_in_process,
            workers_fixed=self.repair.resume_point is not None,
            resumes_exactly=self.repair.resume_point is None or bool(self.parts.snapshot.in_order),
            sharing_strategy=sharing.current(),
            isolated_probe=True,
            loaded_fine_alone_before=sup.history.loaded_fine_alone,
            not_resumable=listed(sup.dataset, COORDINATED_STREAMS),
            stream_delivered=self.parts.streams is not None and self.parts.streams.any_delivered(),
        )
        if self.parts.iterable:
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
        outcome = self.probe_batch(self.parts.snapshot, batch, collate=collating)
        if isinstance(outcome, str):
            self.parts.sup.counts.probe_failures += 1
            ev.notes.append(f"{head}; re-trying them alone failed ({outcome})")
        elif outcome is None:
            ev.notes.append(f"{head}; {alone}")
        else:
            ev.in_flight_index = outcome.index
            ev.sample_file = sample_file(self.parts.snapshot.dataset, outcome.index)
            ev.notes.append(
                f"{head}; re-tried one by one in a fresh worker, sample {outcome.index!r} killed "
                "it again"
            )
            return True
        return False

    def _stream_culprit(self, ev: Evidence, plan: Plan) -> tuple[str, str]:
        """The item in flight at a death is re-tried once when the stream resumes, as a
        map-style sample is; one that kills its worker again ends that worker's stream just
        before it (a generator cannot be read past it): (action, detail)."""
        streams, diagnosis = self.parts.streams, plan.diagnosis
        assert streams is not None
        worker, position = ev.worker_id, ev.iterable_position
        if worker is None or position is None:
            diagnosis.evidence.append(
                "each re-started worker resumes its stream after its last delivered item"
            )
            return "respawned", ""
        named = f"item #{position} of worker {worker}'s stream"
        retried = streams.culprit(worker, position)
        plan.stream_at = (worker, position, retried)  # linked once written: ``incident_written``
        if retried:
            diagnosis.evidence.append(
                f"{named} is re-tried once: worker {worker}'s stream resumes at that item"
            )
            return "respawned", f" ({named}, re-tried once)"
        self.parts.sup.counts.skipped += 1
        lost = f"worker {worker}'s items from #{position} on are lost"
        diagnosis.evidence.append(
            f"worker {worker} died at its item #{position} again: its stream cannot be read past "
            f"it, so {lost}; its items before #{position} arrive (the other workers resume)"
        )
        return "lost", f" ({named}; {lost})"


def _weakly(method: weakref.WeakMethod[Callable[[Evidence, int], Plan]]) -> Any:
    def plan_beside(ev: Evidence, handled: int) -> Plan:
        planner = method()
        assert planner is not None  # the repair lives no longer than its planner
        return planner(ev, handled)

    return plan_beside


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
