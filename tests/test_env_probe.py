"""The load probe behind shm-need/worker-memory: bounded in time, and it kills what it starts."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from loaderdoctor.env.core import run_env_checks
from loaderdoctor.spec import load_dataset

FIXTURE = Path(__file__).parent / "fixtures" / "env" / "images.py"


def children() -> set[int]:
    return {child.pid for child in psutil.Process().children()}


@pytest.mark.slow
def test_a_stuck_sample_is_abandoned_and_its_worker_killed() -> None:
    stuck = load_dataset(f"{FIXTURE}:Stuck")  # a Dataset class is a zero-argument factory
    # Only the probe's own processes: a forkserver or another test's loader may outlive its test.
    before = children()
    started = time.monotonic()
    report = run_env_checks(stuck, batch_size=2, probe_timeout_s=1.0)
    assert time.monotonic() - started < 30
    need = report.check("shm-need")
    assert need.status == "unknown"
    assert "stopped after 1 s with 0 batch(es) loaded" in need.message
    assert children() - before == set()


@pytest.mark.slow
def test_a_failing_sample_is_named() -> None:
    before = children()
    report = run_env_checks(load_dataset(f"{FIXTURE}:Broken"), batch_size=2, num_workers=1)
    need = report.check("worker-memory")
    assert need.status == "unknown"
    assert "loading a batch raised ValueError: corrupt sample 0" in need.message
    assert children() - before == set()
