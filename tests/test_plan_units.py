"""The decision point alone: ``Supervisor.attempt`` (the one place a pool failure is caught) with a
fake planner, and ``Recovery.plan`` (a failure becomes a ``Plan``) with fake books, as tables.

No process starts: the pool, torch's books and the probe are the fakes of ``test_recovery``; each
row says what a failure becomes, and that the policy was asked once.
"""

from __future__ import annotations

from typing import Any

import pytest

from loaderdoctor.forensics import Evidence
from loaderdoctor.supervise.errors import HealingStoppedError
from loaderdoctor.supervise.heal_policy import POLICY, ActionKind, HealPolicy, Retried
from loaderdoctor.supervise.parent.controls import ProbeFailure
from loaderdoctor.supervise.parent.recovery import HandOver, Raise, Recovery, Resumed
from loaderdoctor.supervise.parent.repair import Move
from loaderdoctor.supervise.parent.supervision import (
    IterState,
    Settings,
    Supervision,
)
from loaderdoctor.supervise.parent.supervisor import HANDLED, Supervisor
from loaderdoctor.supervise.parent.watch import PoolFailure
from test_recovery import _setup


def _recovery(heal: bool = True, probe_finds: Any = None) -> tuple[Recovery, Supervision]:
    recovery, _, _, sup, _ = _setup(heal, probe_finds)
    return recovery, sup


def _failure(kind: str = "death", **facts: Any) -> PoolFailure:
    values: dict[str, Any] = {"worker_id": 0, "pid": 100, "stage": "fetch", "batch": 2}
    values.update(facts)
    return PoolFailure(Evidence(kind=kind, **values))


SEGV_AT_4 = {"signal": "SIGSEGV", "in_flight_index": 4, "batch_indices": [4, 5]}
# failure -> plan: (heal, what the re-try alone finds, the failure) -> (move, incident, action)
PLANS = [
    ((True, 4, _failure(**SEGV_AT_4)), (Move.REPLACE, "quarantined", ActionKind.QUARANTINE)),
    ((True, None, _failure(**SEGV_AT_4)), (Move.REPLACE, "respawned", ActionKind.RESPAWN)),
    ((True, "no worker", _failure(**SEGV_AT_4)), (Move.REPLACE, "respawned", ActionKind.RESPAWN)),
    ((False, 4, _failure(**SEGV_AT_4)), (Move.RAISE, "raised", ActionKind.RAISE)),
    (
        (True, None, _failure(exit_code=1, reached_worker_init=False)),
        (Move.RAISE, "raised", ActionKind.RAISE),
    ),
    (
        (True, None, _failure("hang", in_flight_index=4, batch_indices=[4, 5])),
        (Move.REBUILD, "backed-off", ActionKind.BACK_OFF),
    ),
    (
        (True, None, _failure("exception", exception_type="ValueError", exception_message="bad")),
        (Move.RAISE, "raised", ActionKind.RAISE),
    ),
    (
        (
            False,
            None,
            _failure("exception", exception_type="KeyError", internal_origin="recorder.py:1"),
        ),
        (Move.FALL_BACK, "fell-back", ActionKind.FALL_BACK),
    ),
]


@pytest.mark.parametrize(("given", "expected"), PLANS)
def test_a_failure_becomes_a_plan_with_one_consultation_of_the_policy(
    given: tuple[bool, Any, PoolFailure],
    expected: tuple[Move, str, ActionKind],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    heal, probe_finds, failure = given
    recovery, _ = _recovery(heal=heal, probe_finds=probe_finds)
    asked: list[str] = []
    plan_of = HealPolicy.plan

    def counted(self: HealPolicy, *args: Any, **kwargs: Any) -> Any:
        asked.append(args[0].cause)
        return plan_of(self, *args, **kwargs)

    monkeypatch.setattr(HealPolicy, "plan", counted)
    plan = recovery.plan(failure)
    assert (plan.move, plan.record_as, plan.action.kind) == expected
    assert len(asked) == 1
    assert len(recovery.parts.sup.log) == 0, "a plan writes no incident: the repair does"


def test_a_plan_carried_out_writes_its_incident_once() -> None:
    recovery, sup = _recovery(probe_finds=4)
    plan = recovery.plan(_failure(**SEGV_AT_4))
    with pytest.warns(UserWarning, match=r"-> quarantined \(sample 4\)$"):
        outcome = recovery.repair.carry(plan)
    assert outcome == Resumed()
    assert [(i.action, i.diagnosis.evidence[-1]) for i in sup.log] == [
        ("quarantined", "worker 0 respawned alone (pid 100 -> pid 200); 2 owed batches re-sent")
    ]


def test_the_policy_asks_for_the_retry_it_needs_and_decides_on_it() -> None:
    """The probe's result is part of the one consultation: the retrier is called back."""

    class Retrier:
        def __init__(self) -> None:
            self.asked: list[Any] = []

        def alone(self, retry: Any) -> Retried:
            self.asked.append(("alone", retry.culprit, retry.replace_first, retry.stop_pool))
            return Retried(True, 9)  # a control loaded whole earlier failed too: shared

    recovery, _ = _recovery()
    failure = _failure(**SEGV_AT_4)
    at = recovery._situation(failure.evidence, found_alone=False)
    from loaderdoctor.forensics import diagnose

    retrier = Retrier()
    decision = POLICY.plan(diagnose(failure.evidence), at, retrier)
    assert retrier.asked == [("alone", 4, True, False)]
    assert decision.action.kind is ActionKind.RAISE and decision.action.shared
    assert not decision.reproduced and decision.counts_death
    assert "did sample 9, loaded whole earlier in this run" in (decision.action.note or "")


def test_controls_not_loaded_before_are_named_as_such_when_they_fail_too() -> None:
    class Retrier:
        def alone(self, retry: Any) -> Retried:
            return Retried(True, 15, (10,), loaded_before=False)

    recovery, _ = _recovery()
    failure = _failure(**SEGV_AT_4)
    at = recovery._situation(failure.evidence, found_alone=False)
    from loaderdoctor.forensics import diagnose

    decision = POLICY.plan(diagnose(failure.evidence), at, Retrier())
    assert decision.action.kind is ActionKind.RAISE and decision.action.shared
    assert "did samples 15 and 10, none loaded whole yet in this run" in (
        decision.action.note or ""
    )


# --- Supervisor.attempt ------------------------------------------------------------------------


class FakePlanner:
    """What ``Supervisor.attempt`` asks of its recovery, answered from a script."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.calls: list[tuple[str, Any]] = []

    def handle(self, failure: PoolFailure) -> Any:
        self.calls.append(("handle", failure.evidence.kind))
        return self.outcome

    def give_up(self, failure: PoolFailure) -> Any:
        self.calls.append(("give_up", failure.evidence.kind))
        return self.outcome

    def restart(self, failure: PoolFailure, restart: Any) -> Any:
        self.calls.append(("restart", restart()))
        return self.outcome


def _supervisor(outcome: Any) -> tuple[Supervisor, FakePlanner]:
    supervisor = Supervisor.__new__(Supervisor)
    supervisor.state = IterState.RUNNING
    supervisor.failure = ("", None)
    supervisor.successor = None
    supervisor.raising = None
    supervisor.epoch = 0
    planner = FakePlanner(outcome)
    supervisor.recovery = planner  # type: ignore[assignment]
    return supervisor, planner


def _raises(error: BaseException) -> Any:
    def step() -> Any:
        raise error

    return step


def _pool_failure() -> None:
    raise _failure(signal="SIGKILL")


def _ours() -> None:
    Settings.from_keywords(-1.0, True, None, None, None, False)  # ValueError inside loaderdoctor


ERROR = RuntimeError("told")
# step -> (what attempt returns or raises, the planner's calls, the state after)
ATTEMPTS = [
    ("a batch", Resumed(), "a batch", [], IterState.RUNNING),
    (_pool_failure, Resumed(), HANDLED, [("handle", "death")], IterState.RUNNING),
    (_pool_failure, HandOver("next"), HANDLED, [("handle", "death")], IterState.HANDED_OVER),
    (_pool_failure, Raise(ERROR), ERROR, [("handle", "death")], IterState.RUNNING),
    (_pool_failure, Raise(ERROR, ("m", None)), ERROR, [("handle", "death")], IterState.FAILED),
    (_raises(KeyError("user's")), Resumed(), KeyError, [], IterState.RUNNING),
    (_raises(StopIteration()), Resumed(), StopIteration, [], IterState.RUNNING),
    (_raises(HealingStoppedError("stop")), Resumed(), HealingStoppedError, [], IterState.RUNNING),
    (_ours, Resumed(), HANDLED, [("handle", "exception")], IterState.RUNNING),
]


@pytest.mark.parametrize(("step", "outcome", "result", "calls", "state"), ATTEMPTS)
def test_attempt_catches_a_pool_failure_once_and_carries_out_the_outcome(
    step: Any, outcome: Any, result: Any, calls: list[Any], state: IterState
) -> None:
    supervisor, planner = _supervisor(outcome)
    run = step if callable(step) else (lambda: step)
    if isinstance(result, type) or isinstance(result, BaseException):
        with pytest.raises(result if isinstance(result, type) else type(result)) as raised:
            supervisor.attempt(run)
        if isinstance(result, BaseException):
            assert raised.value is result
    else:
        assert supervisor.attempt(run) is result
    assert planner.calls == calls
    assert supervisor.state is state
    if state is IterState.HANDED_OVER:
        assert supervisor.successor == "next"


def test_attempt_raises_on_purpose_what_was_raised_on_purpose() -> None:
    supervisor, planner = _supervisor(Resumed())
    error = ValueError("the user's, re-raised from a received batch")
    supervisor.raising = error
    with pytest.raises(ValueError):
        supervisor.attempt(_raises(error))
    assert planner.calls == [] and supervisor.raising is None


def _state() -> str:
    return "state"


@pytest.mark.parametrize(
    ("restart", "call"), [(None, ("give_up", "death")), (_state, ("restart", "state"))]
)
def test_attempt_while_building_gives_up_or_starts_over(restart: Any, call: Any) -> None:
    supervisor, planner = _supervisor(Resumed())
    assert supervisor.attempt(_pool_failure, building=True, restart=restart) is HANDLED
    assert planner.calls == [call]


def test_a_control_whose_probe_cannot_tell_is_counted_and_said_and_the_retry_decides() -> None:
    recovery, sup = _recovery(probe_finds=4)
    probed: list[list[Any]] = []

    def probe(snapshot: Any, indices: list[Any], collate: bool = False) -> Any:
        probed.append(list(indices))
        return (
            ProbeFailure(4, "native-crash")
            if indices == [4]
            else "the probe's worker could not start"
        )

    recovery.probe_batch = probe
    plan = recovery.plan(_failure(**SEGV_AT_4))
    assert probed[0] == [4] and len(probed) == 2  # the culprit, then one control only
    [control] = probed[1]
    assert control not in (4, 5)  # from another batch than the culprit's
    assert sup.counts.probe_failures == 1
    assert (
        f"control: sample {control!r}, loaded whole earlier, could not be re-tried "
        "(the probe's worker could not start)"
    ) in plan.diagnosis.evidence
    # no control spoke against it: sample 4, which failed again alone, is blamed
    assert (plan.record_as, plan.action.kind) == ("quarantined", ActionKind.QUARANTINE)
