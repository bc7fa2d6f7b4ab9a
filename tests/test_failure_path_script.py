"""scripts/failure_path.py traces one worker death through the supervised core: the policy is
visited twice at most (once to decide, once after the re-try it asked for) and the incident is
written by the executor alone."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import failure_path


def test_one_death_visits_the_policy_twice_and_is_recorded_once() -> None:
    traced = failure_path.trace_one_death()
    functions = [function for _, function in traced.calls]
    assert traced.policy_visits == 2
    assert functions.count("HealPolicy.plan") == 1  # one consultation per failure
    assert functions.count("record") == 1 and functions.count("IncidentLog.append") == 1
    assert functions.index("Retrier.alone") < functions.index("Repair.carry")  # plan, then repair


def test_the_counts_read_the_calls_in_order() -> None:
    traced = failure_path.TracedPath(
        [("a.py", "f"), ("heal_policy.py", "p"), ("a.py", "g"), ("heal_policy.py", "p")]
    )
    assert (traced.stops, traced.policy_visits, traced.returns) == (3, 2, 2)
