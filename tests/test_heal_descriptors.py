"""Out of descriptors (``ulimit -n 64``) under ``run --heal``: torch's own fix first (the
file_system sharing strategy), the same workers kept, every sample delivered once."""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, run_python

SWITCHED = (
    "torch's sharing strategy switched to file_system (tensors cross as named shared-memory "
    "files, not open descriptors); the pool restarts with the same workers"
)


def _few_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


@pytest.mark.slow
@pytest.mark.parametrize(
    "start_method", ["fork", pytest.param("spawn", marks=pytest.mark.extended)]
)
def test_out_of_descriptors_switches_the_sharing_strategy_and_keeps_the_workers(
    tmp_path: Path, start_method: str
) -> None:
    result = run_python(
        ["-m", "loaderdoctor", "run", "--heal", "--report-dir", str(tmp_path), "--", sys.executable,
         str(FIXTURES / "run" / "few_descriptors.py"), start_method],
        preexec_fn=_few_descriptors,
        timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert sorted(loaded["delivered"]) == list(range(256))
    assert loaded["last_workers"] == [0, 1]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "healed"
    assert [(i["cause"], i["action"]) for i in report["incidents"]] == [
        ("fd-exhausted", "respawned")
    ]
    assert report["incidents"][0]["evidence"][-1] == SWITCHED
    assert result.stderr.splitlines()[-1] == "verdict: 1 incident(s) healed (fd-exhausted)"
