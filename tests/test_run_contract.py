"""``loaderdoctor run``'s contract with its user: bad options refused up front, its own death."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import FIXTURES, run_python
from loaderdoctor.system.oom_priority import oom_score_adj

RUN_FIXTURES = FIXTURES / "run"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("report_dir", "message"),
    [
        ("{tmp}/taken", "--report-dir {tmp}/taken is a file, not a folder"),
        ("/proc/loaderdoctor-report", "--report-dir /proc/loaderdoctor-report: cannot create it: "
         "No such file or directory"),
        ("{tmp}/taken/sub", "--report-dir {tmp}/taken/sub: cannot create it: Not a directory"),
    ],
)  # fmt: skip
def test_a_report_dir_that_cannot_be_used_is_one_line_before_the_command_starts(
    tmp_path: Path, report_dir: str, message: str
) -> None:
    (tmp_path / "taken").write_text("a file in the way\n")
    started = tmp_path / "started"
    result = run_python(
        [
            "-m", "loaderdoctor", "run", "--report-dir", report_dir.format(tmp=tmp_path),
            "--", "sh", "-c", f"touch {started}",
        ],
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"loaderdoctor run: error: {message.format(tmp=tmp_path)}"
    ]
    assert not started.exists()  # found before the command started
    assert (tmp_path / "taken").read_text() == "a file in the way\n"


# --- the supervisor's own death -------------------------------------------------------------------
def _start_run(report_dir: Path, *command: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loaderdoctor", "run", "--report-dir", str(report_dir), *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _kill_all(run: subprocess.Popen[str], others: list[psutil.Process]) -> None:
    for process in others:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(run.pid, signal.SIGKILL)
    run.communicate(timeout=30)


@pytest.mark.slow
def test_kill_9_of_run_stops_the_command_which_writes_the_report(tmp_path: Path) -> None:
    run = _start_run(tmp_path, str(RUN_FIXTURES / "sleeper.py"))
    command: list[psutil.Process] = []
    try:
        assert run.stdout is not None
        assert run.stdout.readline().strip() == "ready"  # bounded by the sleeper's own 60 s
        command = _children(run.pid)
        assert len(command) == 1, command  # python sleeper.py (no DataLoader worker left)
        provisional = json.loads((tmp_path / "report.json").read_text())
        assert provisional["supervisor"] == "died"  # on disk from the start
        os.kill(run.pid, signal.SIGKILL)
        gone, alive = psutil.wait_procs(command, timeout=30)
        assert alive == [], "the command outlived loaderdoctor run by 30 s"
        assert [p.returncode for p in gone] == [None]  # not our child: no status to read
        _, stderr = run.communicate(timeout=30)
    finally:
        _kill_all(run, command)
    assert run.returncode == -signal.SIGKILL
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["supervisor"] == "died" and report["status"] == "crashed"
    assert (report["exit_code"], report["signal"]) == (128 + signal.SIGTERM, "SIGTERM")
    assert report["delivered"] == {"batches": 4, "samples": 8}  # counts flushed before the stop
    assert report["notes"][0] == (
        f"loaderdoctor run (pid {run.pid}) died before its command (killed with SIGKILL, or out "
        f"of memory): the command's process {command[0].pid} wrote this report and then stopped "
        "itself with SIGTERM; memory was not sampled"
    )
    assert stderr.splitlines()[-1] == (
        f"loaderdoctor run: the supervisor (pid {run.pid}) died; report written to {tmp_path}; "
        "stopping the command (SIGTERM)"
    )


@pytest.mark.slow
def test_kill_9_of_run_stops_torchrun_and_its_ranks(tmp_path: Path) -> None:
    run = _start_run(
        tmp_path, "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc_per_node=2", str(RUN_FIXTURES / "ddp_sleeper.py"),
    )  # fmt: skip
    command: list[psutil.Process] = []
    try:
        assert run.stdout is not None
        ready = sorted(run.stdout.readline().strip() for _ in range(2))  # bounded: 60 s sleep
        assert ready == ["ready 0", "ready 1"]
        command = _children(run.pid)  # the agent, its 2 ranks and their DataLoader workers
        os.kill(run.pid, signal.SIGKILL)
        _, alive = psutil.wait_procs(command, timeout=45)  # the agent's own grace is 30 s
        assert alive == [], f"outlived loaderdoctor run by 45 s: {alive}"
    finally:
        _kill_all(run, command)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["supervisor"] == "died" and report["status"] == "crashed"
    assert report["delivered"] == {"batches": 8, "samples": 16}  # 4 batches of 2 per rank
    assert [(r["rank"], r["loaders"], r["workers"]) for r in report["ranks"]] == [
        (0, 1, 1),
        (1, 1, 1),
    ]


@pytest.mark.slow
def test_kill_9_of_run_stops_a_command_that_is_not_python(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    run = _start_run(tmp_path, "--", "sh", "-c", f"touch {marker}; sleep 60 & wait")
    command: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        command = _children(run.pid)
        shell = [p for p in command if p.ppid() == run.pid]
        assert len(shell) == 1, command
        os.kill(run.pid, signal.SIGKILL)
        _, alive = psutil.wait_procs(shell, timeout=30)
        assert alive == [], "the shell outlived loaderdoctor run by 30 s"  # the kernel's SIGTERM
    finally:
        _kill_all(run, command)
    report = json.loads((tmp_path / "report.json").read_text())  # the one written at the start
    assert report["supervisor"] == "died" and report["status"] == "crashed"
    assert (report["exit_known"], report["exit_code"], report["signal"]) == (False, -1, None)
    assert report["notes"][0] == (
        f"loaderdoctor run (pid {run.pid}) wrote this report when it started the command and did "
        "not finish (killed, out of memory, or the machine stopped): the command's exit status "
        f"is unknown; loaderdoctor report {tmp_path} makes the report from what the command's "
        "processes wrote"
    )


# --- odd but real programs ------------------------------------------------------------------------
@pytest.mark.slow
def test_counts_of_a_process_survive_its_exec(tmp_path: Path) -> None:
    result = run_python(
        [
            "-m",
            "loaderdoctor",
            "run",
            "--report-dir",
            str(tmp_path),
            str(RUN_FIXTURES / "execs.py"),
        ],
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["first image: 3 batches", "second image: 2 batches"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["delivered"] == {"batches": 5, "samples": 24}  # 3 × 4, then 2 × 6
    assert [(r["loaders"], r["delivered"]) for r in report["ranks"]] == [
        (2, {"batches": 5, "samples": 24})  # one process (one pid), two images
    ]


@pytest.mark.slow
def test_nested_run_is_one_supervisor_and_one_report(tmp_path: Path) -> None:
    outer, inner = tmp_path / "outer", tmp_path / "inner"
    result = run_python(
        [
            "-m", "loaderdoctor", "run", "--report-dir", str(outer), "--",
            sys.executable, "-m", "loaderdoctor", "run", "--report-dir", str(inner), "--",
            sys.executable, str(RUN_FIXTURES / "train.py"), "clean",
        ],
        timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == "done"
    lines = result.stderr.splitlines()
    assert lines[0].startswith("loaderdoctor run: already supervised by loaderdoctor run (pid ")
    assert lines[0].endswith(f"); its report in {outer} covers this command, with its options")
    report = json.loads((outer / "report.json").read_text())
    assert report["delivered"] == {"batches": 20, "samples": 80}  # 2 epochs × 10 batches of 4
    assert [r["loaders"] for r in report["ranks"]] == [1] and report["notes"] == []
    assert not inner.exists()  # no second supervisor, no second report


# --- numbers that mean what they say ---------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "batches", "samples", "loaders", "workers"),
    [
        # 2 workers, one killed; the culprit loads fine alone (in a worker of its own). Where
        # the kernel log and the cgroup counters show no OOM kill, the dead worker is replaced
        # alone: 3 worker processes ran, as the loader's records say (where they cannot be read,
        # the pool of 2 is rebuilt, backed off to prefetch 1: 4). A kill is a memory suspect, so
        # no early replacement starts beside the re-try.
        ("respawn", 4, 16, 1, 3),
        ("prepared", 3, 12, 1, 0),  # accelerate-style prepare(): the user's one loader
        ("self-batched", 5, 20, 1, 0),  # batch_size=None over a stream batching by 4
        ("stream", 4, 10, 1, 2),  # 5 items per worker: batches of 4 and 1 in each
        ("ours", 3, 11, 1, 0),  # loaderdoctor.DataLoader built by the script, 1 sample skipped
    ],
)
def test_run_counts_from_the_loaders_own_records(
    tmp_path: Path, mode: str, batches: int, samples: int, loaders: int, workers: int
) -> None:
    result = run_python(
        [
            "-m", "loaderdoctor", "run", "--heal", "--report-dir", str(tmp_path / "r"),
            str(RUN_FIXTURES / "counts.py"), mode,
        ],
        env={"COUNTS_MARKER": str(tmp_path / "killed")},
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [f"{batches} batches"]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["delivered"] == {"batches": batches, "samples": samples}
    expected_incidents = INCIDENTS_OF_COUNTS.get(mode, [])
    if mode == "respawn" and OUTSIDE_KILL not in report["incidents"][0]["evidence"]:
        workers, expected_incidents = 4, [("killed-by-signal", "backed-off", [5])]
    assert [(r["loaders"], r["workers"]) for r in report["ranks"]] == [(loaders, workers)]
    incidents = [(i["cause"], i["action"], i["indices"]) for i in report["incidents"]]
    assert incidents == expected_incidents
    # As the loader report says it: the workers go before the training process
    own = oom_score_adj()
    protection = (
        "on: workers at oom_score_adj 900, samples re-tried alone at 1000, the training process "
        f"at {own}: the OOM killer takes them first"
    )
    expected = protection if workers else None
    assert (report["oom_protection"], report["ranks"][0]["oom_protection"]) == (expected, expected)
    assert (f"  OOM protection: {protection}" in result.stderr.splitlines()) == bool(workers)


OUTSIDE_KILL = "no OOM kill in the kernel log or the cgroup counters"
INCIDENTS_OF_COUNTS = {
    "respawn": [("killed-by-signal", "respawned", [5])],
    "ours": [("sample-error", "skipped", [7])],
}


@pytest.mark.slow
@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_hang_timeout_that_is_no_number_of_seconds_is_a_usage_error(
    tmp_path: Path, value: str
) -> None:
    result = run_python(
        ["-m", "loaderdoctor", "run", "--report-dir", str(tmp_path), f"--hang-timeout={value}",
         "--", "true"],
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"loaderdoctor run: error: argument --hang-timeout: must be 0 or more seconds: {value}"
    )
    assert not (tmp_path / "report.json").exists()


@pytest.mark.slow
def test_the_bootstrap_is_one_module_executed_once_and_the_command_sees_the_loader(
    tmp_path: Path,
) -> None:
    code = (
        "import sys, torch.utils.data as data\n"
        "print(sorted(m for m in sys.modules if 'loaderdoctor' in m and 'runner' in m))\n"
        "print(data.DataLoader.__module__, data.DataLoader.__name__)\n"
    )
    result = run_python(
        ["-m", "loaderdoctor", "run", "--report-dir", str(tmp_path), "--", sys.executable,
         "-c", code],
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        "['loaderdoctor.runner', 'loaderdoctor.runner.bootstrap', 'loaderdoctor.runner.lifeline', "
        "'loaderdoctor.runner.live', 'loaderdoctor.runner.patch', 'loaderdoctor.runner.pdeathsig', "
        "'loaderdoctor.runner.protocol', 'loaderdoctor.runner.subclasses']",
        "loaderdoctor.runner.patch DataLoader",
    ]
