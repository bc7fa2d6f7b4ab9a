"""``loaderdoctor demo``: real planted faults get their verdicts; the CLI and the renderer."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loaderdoctor.demo import SCENARIOS, DemoReport, ScenarioResult, run_demo
from loaderdoctor.demo.dataset import ShapesFolder
from loaderdoctor.forensics.evidence import Diagnosis
from loaderdoctor.report.demo import format_json, format_text, top_frames

EXPECTED = {
    "corrupt-jpeg": ("sample-error", 5, "circle/circle_05.jpg"),
    "native-crash": ("native-crash", 20, "square/square_04.jpg"),
    "ragged-batch": ("collate-error", 27, None),
    "stalled-read": ("worker-hang", 9, "circle/circle_09.jpg"),
}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> DemoReport:
    return run_demo(keep=tmp_path_factory.mktemp("demo") / "data")


@pytest.mark.slow
def test_every_planted_fault_gets_its_verdict(report: DemoReport) -> None:
    assert [result.name for result in report.scenarios] == [s.name for s in SCENARIOS]
    for result in report.scenarios:
        cause, index, file = EXPECTED[result.name]
        d = result.diagnosis
        assert d is not None, result.error
        assert d.cause == cause, (result.name, d.evidence)
        assert d.indices == [index]
        if file is not None:
            assert d.sample_file == os.path.join(report.dataset_dir, result.name, file)
            assert Path(d.sample_file).exists()  # kept with keep=...
        assert result.passed
        assert result.seconds < 30
    assert report.passed
    assert report.dataset_kept
    assert len(ShapesFolder(Path(report.dataset_dir) / "corrupt-jpeg")) == report.images


@pytest.mark.slow
def test_hang_verdict_carries_the_stuck_workers_stack(report: DemoReport) -> None:
    hang = {result.name: result for result in report.scenarios}["stalled-read"].diagnosis
    assert hang is not None and hang.python_stack
    assert top_frames(hang.python_stack)[0].startswith("_stalled_read  (")


@pytest.mark.slow
def test_crash_verdict_carries_the_workers_stack(report: DemoReport) -> None:
    crash = {result.name: result for result in report.scenarios}["native-crash"].diagnosis
    assert crash is not None and crash.signal == "SIGSEGV"
    assert crash.python_stack
    assert top_frames(crash.python_stack)[1].startswith("_native_decoder_bug  (")


@pytest.mark.slow
def test_no_worker_is_left_behind(report: DemoReport) -> None:
    assert report.scenarios  # the module's demo has run
    assert multiprocessing.active_children() == []


def test_keep_refuses_a_folder_with_files(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("x")
    with pytest.raises(FileExistsError):
        run_demo(keep=tmp_path)
    with pytest.raises(ValueError, match="unknown scenario"):
        run_demo(names=["no-such-scenario"])


@pytest.mark.slow
def test_cli_json_exits_zero_with_the_four_causes(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "loaderdoctor", "demo", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={
            **{k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"},
            "TMPDIR": str(tmp_path),
        },
    )
    try:
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.communicate()
    assert process.returncode == 0, stderr
    data = json.loads(stdout)
    assert data["schema"] == 1 and data["passed"] is True
    causes = [scenario["diagnosis"]["cause"] for scenario in data["scenarios"]]
    assert causes == ["sample-error", "native-crash", "collate-error", "worker-hang"]
    # A process without faulthandler enabled up front gets the crashing worker's stack.
    crash_stack = data["scenarios"][1]["diagnosis"]["python_stack"]
    assert top_frames(crash_stack)[1].startswith("_native_decoder_bug  (")
    # The datasets, the supervisor's logs and the killed workers' pymp-* dirs are all removed.
    assert not os.path.exists(data["dataset_dir"])
    # Workers may finish exiting (and remove their pymp-* dirs) a moment after the parent.
    deadline = time.monotonic() + 10
    while list(tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(tmp_path.iterdir()) == []
    round_trip = DemoReport.from_dict(data)
    assert json.loads(format_json(round_trip)) == data


# --- the renderer, on a fixed report ------------------------------------------------------


def _fixed_report() -> DemoReport:
    crash = Diagnosis(
        cause="native-crash",
        title="The worker crashed in native code",
        confidence=0.95,
        worker_id=1,
        pid=4242,
        signal="SIGSEGV",
        exit_code=None,
        indices=[20],
        evidence=[
            "the worker died of SIGSEGV, a fatal signal from native code",
            "faulthandler captured the Python stack at the crash",
            "in flight: sample 20, fetch stage, batch 1",
            "worker 1 (pid 4242) was killed by SIGSEGV",
            "batch indices: [16, 17]",
            "memory cgroup oom_kill counter: 0 -> 0",
        ],
        fixes=["Look at the Python stack above.", "Upgrade the library."],
        sample_file="/tmp/ld-demo/native-crash/square/square_04.jpg",
        batch=1,
        python_stack=(
            "Fatal Python error: Segmentation fault\n\n"
            "Thread 0x00007f01 (most recent call first):\n"
            '  File "/usr/lib/python3.11/threading.py", line 327 in wait\n\n'
            "Current thread 0x00007f00 (most recent call first):\n"
            '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at\n'
            '  File "/x/src/loaderdoctor/demo/dataset.py", line 121 in _native_decoder_bug\n'
            '  File "/x/src/loaderdoctor/demo/dataset.py", line 136 in decode_image\n'
            '  File "/x/src/loaderdoctor/demo/dataset.py", line 169 in __getitem__\n'
            '  File "/venv/site-packages/torch/utils/data/_utils/fetch.py", line 54 in fetch\n'
        ),
        docs="docs/causes/native-crash.md",
    )
    return DemoReport(
        scenarios=[
            ScenarioResult(
                name="native-crash",
                planted="a header that crashes the decoder",
                expected_cause="native-crash",
                planted_index=20,
                planted_file="/tmp/ld-demo/native-crash/square/square_04.jpg",
                dataset_dir="/tmp/ld-demo/native-crash",
                diagnosis=crash,
                seconds=0.25,
                stock_message="RuntimeError: DataLoader worker (pid 4242) is killed by signal: "
                "Segmentation fault.",
            ),
            ScenarioResult(
                name="stalled-read",
                planted="a read that never returns",
                expected_cause="worker-hang",
                planted_index=9,
                planted_file="/tmp/ld-demo/stalled-read/circle/circle_09.jpg",
                diagnosis=None,
                seconds=30.0,
                error="the loader finished the epoch without an error",
            ),
        ],
        seconds=30.3,
        dataset_dir="/tmp/ld-demo",
        images=48,
    )


def test_renderer_panels_and_summary() -> None:
    text = format_text(_fixed_report(), width=100)
    for expected in (
        "Each scenario plants one fault among 48 generated images and loads them with\n"
        "loaderdoctor.DataLoader(batch_size=16, num_workers=2) until it fails.",
        "✓ 1/2 native-crash → native-crash",
        "│ planted      sample 20 (square_04.jpg): a header that crashes the decoder",
        "│ stock torch  RuntimeError: DataLoader worker (pid 4242) is killed by signal: "
        "Segmentation fault.",
        "│ verdict      The worker crashed in native code (confidence 0.95)",
        "│ worker       1 (pid 4242), batch 1",
        "│ sample       20 (native-crash/square/square_04.jpg)",
        "│ evidence     the worker died of SIGSEGV, a fatal signal from native code",
        "│              worker 1 (pid 4242) was killed by SIGSEGV",
        "│ stack        string_at  (python3.11/ctypes/__init__.py:519)",
        "│              _native_decoder_bug  (loaderdoctor/demo/dataset.py:121)",
        "│              __getitem__  (loaderdoctor/demo/dataset.py:169)",
        "│ fix          Look at the Python stack above.",
        "│ more         loaderdoctor explain --cause native-crash",
        "0.2 s ─╯",
        "✗ 2/2 stalled-read → no verdict",
        "│ verdict      the loader finished the epoch without an error",
        "│ expected     worker-hang naming sample 9 (/tmp/ld-demo/stalled-read/circle/circle_09.jpg)",
        "│ native-crash │ 20 (square_04.jpg) │ ✓ native-crash │ 20 (square_04.jpg)",
        "│ stalled-read │ 9 (circle_09.jpg)  │ ✗ no verdict   │ the loader finished",
        "1 of 2 planted faults got the expected verdict in 30.3 s: loaderdoctor does not work as",
    ):
        assert expected in text, expected
    # Lines the "where" rows already say, the runner-up evidence and the 5th frame are left out.
    for absent in (
        "in flight:",
        "batch indices",
        "oom_kill",
        "threading.py",
        "fetch  (",
        "Next:",
        "stock torch  \n",
    ):
        assert absent not in text, absent


def test_renderer_json_has_schema_and_verdicts() -> None:
    data = json.loads(format_json(_fixed_report()))
    assert data["schema"] == 1 and data["passed"] is False
    assert [s["passed"] for s in data["scenarios"]] == [True, False]
    assert data["scenarios"][0]["diagnosis"]["cause"] == "native-crash"
    assert data["scenarios"][1]["diagnosis"] is None


@pytest.mark.slow
def test_cli_heal_finishes_every_epoch_and_quarantines_each_culprit() -> None:
    from conftest import run_python

    result = run_python(["-m", "loaderdoctor", "demo", "--heal", "--json"], timeout=120)
    assert result.returncode == 0, result.stderr
    stdout = result.stdout
    data = json.loads(stdout)
    assert data["heal"] is True and data["passed"] is True
    for scenario in data["scenarios"]:
        assert scenario["delivered_samples"] == 47
        assert scenario["quarantine"] == [scenario["planted_index"]]
    actions = [scenario["heal_action"] for scenario in data["scenarios"]]
    assert actions == ["skipped", "quarantined", "skipped", "quarantined"]
