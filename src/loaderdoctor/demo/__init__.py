"""A bundled, self-contained image pipeline with real faults planted in it, for ``loaderdoctor demo``."""

from __future__ import annotations

from loaderdoctor.demo.scenarios import (
    SCENARIOS,
    DemoReport,
    Scenario,
    ScenarioResult,
    run_demo,
    run_scenario,
)

__all__ = ["SCENARIOS", "DemoReport", "Scenario", "ScenarioResult", "run_demo", "run_scenario"]
