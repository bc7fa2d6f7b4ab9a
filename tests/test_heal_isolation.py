"""Workers that cannot start under spawn (no main guard): healing forks them instead of loading
in the training process, so a sample that kills its loading process (a real SIGKILL) is
quarantined and the training goes on. Under ``loaderdoctor run --heal``."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, run_python


@pytest.mark.slow
def test_no_main_guard_under_spawn_keeps_a_killing_sample_out_of_the_training_process(
    tmp_path: Path,
) -> None:
    script = str(FIXTURES / "run" / "unguarded_killer.py")
    result = run_python(
        ["-m", "loaderdoctor", "run", "--heal", "--report-dir", str(tmp_path), "--", sys.executable,
         script, "spawn"],
        timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(
        r"received \[0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15\] in pid \d+\n",
        result.stdout,
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["status"], report["quarantine"]) == ("healed", [5])
    assert report["delivered"] == {"batches": 4, "samples": 15}
    assert [(i["cause"], i["action"]) for i in report["incidents"]] == [
        ("main-guard-missing", "backed-off"),
        ("killed-by-signal", "quarantined"),
    ]
    assert report["incidents"][0]["evidence"][-1] == (
        "the epoch loads in 2 forked worker process(es) instead (multiprocessing_context="
        "'fork', which pickles nothing and re-runs no script): isolated from the training process"
    )
    assert report["incidents"][1]["indices"] == [5]
    assert result.stderr.splitlines()[-1] == (
        "verdict: 2 incident(s) healed (killed-by-signal, main-guard-missing)"
    )
