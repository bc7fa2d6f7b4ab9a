"""scripts/torchdata_suite.py: torchdata's StatefulDataLoader suite, stock against ours and run.

The suite is torchdata's files and is not in this repository; these tests check what the runner
adds: the swap, the naming of each test by its file, and the report of the "run" side.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def _load_script() -> ModuleType:
    if str(SCRIPTS) not in sys.path:  # as Python does for a script: its shared module
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location("torchdata_suite", SCRIPTS / "torchdata_suite.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["torchdata_suite"] = module
    spec.loader.exec_module(module)
    return module


torchdata_suite = _load_script()
import suite_compare  # noqa: E402  (on sys.path once the script is loaded)

JUNIT = """\
<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="test_state_dict.TestSnapshotEnd" name="test_generator" time="0.1"/>
<testcase classname="test_dataloader.TestDataLoader" name="test_typing" time="0.1">
  <failure message="TypeError: not a generic class">trace</failure></testcase>
<testcase classname="test_sampler" name="test_plain_function" time="0.1"/>
<testcase classname="conftest" name="not_ours" time="0.1"/>
</testsuite></testsuites>
"""


def test_each_test_is_named_by_the_file_it_came_from(tmp_path: Path) -> None:
    junit = tmp_path / "run.xml"
    junit.write_text(JUNIT)
    suite = Path("/td")
    files = [
        suite / name for name in ("test_state_dict.py", "test_dataloader.py", "test_sampler.py")
    ]
    outcomes, messages = suite_compare.parse_junit(junit, files)
    assert outcomes == {
        "/td/test_state_dict.py::TestSnapshotEnd::test_generator": "passed",
        "/td/test_dataloader.py::TestDataLoader::test_typing": "failed",
        "/td/test_sampler.py::test_plain_function": "passed",
    }
    assert messages["/td/test_dataloader.py::TestDataLoader::test_typing"] == (
        "TypeError: not a generic class"
    )


def test_a_directory_without_the_suite_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(suite_compare.UsageError) as raised:
        torchdata_suite.suite_files(tmp_path)
    assert str(raised.value) == (
        f"{tmp_path}: no test_state_dict.py there; fetch torchdata's test/stateful_dataloader "
        "at the release's tag first"
    )


def test_the_run_side_is_labelled_and_its_report_summed_up(tmp_path: Path) -> None:
    stock = suite_compare.RunResult({"s::a": "passed", "s::b": "passed"}, {}, 10.0, False, 0)
    run = suite_compare.RunResult(
        {"s::a": "passed", "s::b": "failed"}, {"s::b": "boom"}, 11, False, 1
    )
    recheck = suite_compare.Recheck("s::b", "run", 0, 1, 1, "boom")
    comparison = suite_compare.Comparison(
        "/td", "0.11.0", stock, run, [recheck], 1.0, 2.0,
        title="torchdata's StatefulDataLoader suite", library="torchdata", label="run",
    )  # fmt: skip
    assert suite_compare.format_comparison(comparison).splitlines() == [
        "torchdata's StatefulDataLoader suite: /td",
        "torchdata 0.11.0; load average 1.0 before, 2.0 after",
        "",
        "| run   | passed | failed | errors | skipped |    time |",
        "|-------|--------|--------|--------|---------|---------|",
        "| stock |      2 |      0 |      0 |       0 |    10 s |",
        "| run   |      1 |      1 |      0 |       0 |    11 s |",
        "",
        "failing on both sides (stock's own failures): 0",
        "",
        "fail only with run, on every re-run too: 1",
        "  s::b (first failed with run; re-runs: stock failed 0/1, run 1/1): boom",
        "",
        "fail only with stock, on every re-run too: 0",
        "",
        "failed on one side once, not on its re-runs (flaky under load): 0",
        "",
        "verdict: run fails 1 test(s) that stock passes",
    ]
    report = tmp_path / "report.json"
    report.write_text(
        json.dumps(
            {
                "status": "ok",
                "incidents": [],
                "ranks": [{"loaders": 3}, {"loaders": 2}],
                "notes": ["1 DataLoader(s) ran as plain torch"],
            }
        )
    )
    assert torchdata_suite.run_report_summary(report) == [
        "run report: status ok, 0 incident(s), 5 supervised DataLoader(s) iterated",
        "  note: 1 DataLoader(s) ran as plain torch",
    ]


@pytest.mark.slow
def test_the_swap_makes_torchdatas_names_loaderdoctors_in_a_new_interpreter(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torchdata", reason="torchdata is an extra (the eco extra has it)")
    (tmp_path / "sitecustomize.py").write_text(torchdata_suite.SWAP_SITECUSTOMIZE)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *sys.path])
    probe = subprocess.run(
        [sys.executable, "-c", torchdata_suite.SWAP_PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split()[:2] == ["True", "loaderdoctor.supervise.stateful"]
