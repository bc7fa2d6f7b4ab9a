"""The chaos harness's own check (``chaos.check``), from results written by hand: a healing that
stops at its limit passes only when the plan accounts for every death it counts."""

from __future__ import annotations

from typing import Any

import pytest

import chaos

STOPPED = (
    "HealingStoppedError: loaderdoctor healing stopped: 9 worker deaths in a row with no batch "
    "delivered between them and no sample to blame (max_deaths_in_a_row=8: "
    "DataLoader(max_deaths_in_a_row=N), or loaderdoctor run --max-deaths-in-a-row N, allows more)"
)


def plan_of(**changes: Any) -> dict[str, Any]:
    plan = chaos.generate(7, stateful_available=False)
    plan.update({"faults": {}, "collate_fault": None, "init_fault": None, "epochs": []})
    plan.update(changes)
    return plan


def stopped_with(kills: int, error: str = STOPPED) -> dict[str, Any]:
    return {"error": error, "kills_since_batch": kills, "epochs": [], "status": "crashed"}


def test_a_stop_the_harness_killed_its_way_to_keeps_the_promise() -> None:
    assert chaos.check(plan_of(random_kills=1.6), stopped_with(kills=9)) == []


def test_a_stop_with_fewer_deaths_than_it_counts_breaks_the_promise() -> None:
    assert chaos.check(plan_of(random_kills=1.6), stopped_with(kills=3)) == [f"raised: {STOPPED}"]


@pytest.mark.parametrize(
    ("changes", "accounted"),
    [
        ({"faults": {"3": "segv-once", "5": "kill-once"}}, True),
        # a raise kills no worker; a fault that strikes always is quarantined, not counted
        ({"faults": {"3": "raise-once", "5": "segv-always"}}, False),
        ({"collate_fault": {"index": 2, "mode": "kill-once"}, "init_fault": "segv-once"}, True),
    ],
)
def test_faults_planted_once_account_for_one_death_each(
    changes: dict[str, Any], accounted: bool
) -> None:
    problems = chaos.check(plan_of(**changes), stopped_with(kills=7))
    assert (problems == []) is accounted


def test_any_other_raise_breaks_the_promise_however_many_kills() -> None:
    error = "WorkerDiedError: DataLoader worker (pid 12) exited unexpectedly"
    assert chaos.check(plan_of(), stopped_with(kills=20, error=error)) == [f"raised: {error}"]
