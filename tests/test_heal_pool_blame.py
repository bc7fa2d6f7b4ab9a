"""A worker stuck only because the pool is too big (three slots, four workers): healing re-tries
the sample alone with the pool stopped, finds it innocent and halves the workers instead of
quarantining it. Real flock'ed slots, real workers, under ``loaderdoctor run --heal``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, run_python


@pytest.mark.slow
@pytest.mark.parametrize(
    "start_method", ["fork", pytest.param("spawn", marks=pytest.mark.extended)]
)
def test_a_pool_too_big_for_its_resource_backs_off_and_quarantines_nothing(
    tmp_path: Path, start_method: str
) -> None:
    slots = tmp_path / "slots"
    slots.mkdir()
    result = run_python(
        ["-m", "loaderdoctor", "run", "--heal", "--hang-timeout", "8", "--report-dir",
         str(tmp_path / "report"), "--", sys.executable, str(FIXTURES / "run" / "slots.py"),
         start_method, str(slots)],
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["delivered"] == list(range(32))  # each once, in torch's order
    assert loaded["last_workers"] == [0, 1]  # two workers, then
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert (report["status"], report["quarantine"]) == ("healed", [])
    [incident] = report["incidents"]
    # the worker left without a slot: whichever started last
    assert (incident["cause"], incident["action"]) == ("worker-hang", "backed-off")
    culprit = incident["indices"][0]
    assert incident["evidence"][-2:] == [
        f"sample {culprit} loaded fine alone with the pool stopped: the pool, not the sample "
        "(workers contending for a resource, a lock or memory)",
        "continuing with num_workers=2, prefetch=1",
    ]
