"""scripts/torch_suite.py: the runner of PyTorch's own DataLoader suite, stock against ours.

The suite itself is PyTorch's file and is not in this repository; these tests check what the
runner adds: the swap, the reading of pytest's junit-xml, the flake rule and the report.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "torch_suite.py"


def _load_script() -> ModuleType:
    if str(SCRIPT.parent) not in sys.path:  # as Python does for a script: its shared module
        sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("torch_suite", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["torch_suite"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


torch_suite = _load_script()

JUNIT = """\
<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="test_dataloader.TestDataLoader" name="test_ok" time="0.1"/>
<testcase classname="test_dataloader.TestDataLoader" name="test_bad" time="0.1">
  <failure message="AssertionError: 1 != 2&#10;more">trace</failure></testcase>
<testcase classname="test_dataloader.TestDataLoader" name="test_bad" time="0.1">
  <error message="failed on teardown with &quot;OSError&quot;">trace</error></testcase>
<testcase classname="test_dataloader.TestDataLoaderDeviceTypeCPU" name="test_x_cpu" time="0">
  <skipped type="pytest.skip" message="CUDA unavailable">skip</skipped></testcase>
<testcase classname="test_dataloader.TestConvAfterFork" name="test_conv" time="0.1">
  <error message="collection failure">trace</error></testcase>
</testsuite></testsuites>
"""


def test_parse_junit_names_each_test_by_node_id_with_one_outcome(tmp_path: Path) -> None:
    junit = tmp_path / "run.xml"
    junit.write_text(JUNIT)
    suite = Path("/suites/test_dataloader.py")
    outcomes, messages = torch_suite.parse_junit(junit, suite)
    assert outcomes == {
        "/suites/test_dataloader.py::TestDataLoader::test_ok": "passed",
        "/suites/test_dataloader.py::TestDataLoader::test_bad": "failed",
        "/suites/test_dataloader.py::TestDataLoaderDeviceTypeCPU::test_x_cpu": "skipped",
        "/suites/test_dataloader.py::TestConvAfterFork::test_conv": "error",
    }
    assert messages["/suites/test_dataloader.py::TestDataLoader::test_bad"] == (
        "AssertionError: 1 != 2"
    )


@pytest.mark.parametrize(
    ("failed_first_with", "stock_failures", "ours_failures", "verdict"),
    [
        ("ours", 0, 2, "differs"),  # ours fails every time, stock never
        ("ours", 0, 1, "flaky"),  # ours passed once of two
        ("ours", 1, 2, "flaky"),  # stock fails it too under load
        ("stock", 2, 0, "differs"),
        ("stock", 0, 0, "flaky"),
    ],
)
def test_a_one_sided_failure_differs_only_when_every_rerun_agrees(
    failed_first_with: str, stock_failures: int, ours_failures: int, verdict: str
) -> None:
    recheck = torch_suite.Recheck("t", failed_first_with, stock_failures, ours_failures, 2, "m")
    assert recheck.verdict == verdict


def _result(outcomes: dict[str, str], seconds: float = 10.0) -> object:
    messages = {test: f"{test} says why" for test in outcomes}
    return torch_suite.RunResult(outcomes, messages, seconds, False, 0)


def test_the_report_counts_both_runs_and_lists_what_fails_only_with_ours() -> None:
    stock = _result({"s::a": "passed", "s::b": "failed", "s::c": "passed", "s::d": "skipped"})
    ours = _result({"s::a": "passed", "s::b": "failed", "s::c": "error", "s::d": "skipped"}, 12)
    recheck = torch_suite.Recheck("s::c", "ours", 0, 1, 1, "RuntimeError: boom")
    comparison = torch_suite.Comparison("s", "2.13.0+cpu", stock, ours, [recheck], 3.04, 4.5)
    assert comparison.same_failures is False
    assert torch_suite.format_comparison(comparison).splitlines() == [
        "PyTorch's DataLoader suite: s",
        "torch 2.13.0+cpu; load average 3.0 before, 4.5 after",
        "",
        "| run   | passed | failed | errors | skipped |    time |",
        "|-------|--------|--------|--------|---------|---------|",
        "| stock |      2 |      1 |      0 |       1 |    10 s |",
        "| ours  |      1 |      1 |      1 |       1 |    12 s |",
        "",
        "failing on both sides (stock's own failures): 1",
        "  s::b: s::b says why",
        "",
        "fail only with ours, on every re-run too: 1",
        "  s::c (first failed with ours; re-runs: stock failed 0/1, ours 1/1): RuntimeError: boom",
        "",
        "fail only with stock, on every re-run too: 0",
        "",
        "failed on one side once, not on its re-runs (flaky under load): 0",
        "",
        "verdict: ours fails 1 test(s) that stock passes",
    ]


def test_a_flake_alone_leaves_the_verdict_that_ours_has_stocks_failures_only() -> None:
    stock = _result({"s::a": "passed", "s::b": "passed"})
    ours = _result({"s::a": "passed", "s::b": "failed"})
    recheck = torch_suite.Recheck("s::b", "ours", 0, 0, 1, "timed out")
    comparison = torch_suite.Comparison("s", "2.13.0", stock, ours, [recheck])
    report = torch_suite.format_comparison(comparison).splitlines()
    assert report[-4:] == [
        "failed on one side once, not on its re-runs (flaky under load): 1",
        "  s::b (first failed with ours; re-runs: stock failed 0/1, ours 0/1): timed out",
        "",
        "verdict: ours has stock's failures only",
    ]


@pytest.mark.slow
def test_the_swap_makes_both_of_torchs_names_loaderdoctors_in_a_new_interpreter(
    tmp_path: Path,
) -> None:
    (tmp_path / "sitecustomize.py").write_text(torch_suite.SWAP_SITECUSTOMIZE)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *sys.path])
    probe = subprocess.run(
        [sys.executable, "-c", torch_suite.SWAP_PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split()[:2] == ["True", "loaderdoctor.supervise.loader"]
