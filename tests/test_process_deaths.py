"""Deaths in the command's tree that no supervised DataLoader reports: a process killed by a signal
that its parent never collects (torchdata.nodes' process workers: the pipeline then waits for
ever). ``run`` reads the zombie's exit status from /proc, says it while the command runs on, and
names it in the report."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, run_python
from loaderdoctor.forensics import Diagnosis
from loaderdoctor.forensics.incident import Incident
from loaderdoctor.report.html.run import format_html
from loaderdoctor.report.run_text import format_text, format_verdict
from loaderdoctor.runner.deaths import DeathWatch
from loaderdoctor.runner.model import ProcessDeath, RunReport
from loaderdoctor.system.zombie import parse_stat, process_stat

linux_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
# The tail of a stat line after the state, with the parent at field 4, the start time at 22 and
# the exit status at 52 (fields 5-21 and 23-51 are zeros here)
_TAIL = "{parent} " + "0 " * 17 + "{start} " + "0 " * 29 + "{status}"


def _stat(name: str, state: str, status: int, parent: int = 100, start: int = 7) -> str:
    return f"4242 ({name}) {state} " + _TAIL.format(parent=parent, start=start, status=status)


def test_a_stat_line_says_how_a_zombie_ended() -> None:
    segv = parse_stat(4242, _stat("py (x) y", "Z", 11 | 0x80))
    assert segv is not None
    assert (segv.name, segv.parent_pid, segv.start_ticks) == ("py (x) y", 100, 7)
    assert (segv.zombie, segv.signal, segv.exit_code) == (True, "SIGSEGV", None)
    exited = parse_stat(4242, _stat("python", "Z", 3 << 8))
    assert exited is not None and (exited.signal, exited.exit_code) == (None, 3)
    alive = parse_stat(4242, _stat("python", "S", 0))
    assert alive is not None and (alive.zombie, alive.signal, alive.exit_code) == (
        False,
        None,
        None,
    )
    assert parse_stat(4242, "4242 python") is None  # no name in parentheses
    assert parse_stat(4242, "4242 (python) Z") is None  # cut short


def _child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def _until_zombie(child: subprocess.Popen[bytes], watch: DeathWatch | None = None) -> float:
    """Tell ``watch`` of ``child`` each 50 ms until it is a zombie; the fake time it was."""
    now = 0.0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if watch is not None:
            watch.saw(child.pid, now)
        stat = process_stat(child.pid)
        if stat is not None and stat.zombie:
            return now
        now += 0.05
        time.sleep(0.05)
    child.kill()
    pytest.fail(f"pid {child.pid} did not end within 60 s")


def _until_running(pid: int, code: str) -> None:
    """Wait until ``pid`` runs ``code`` (its exec done), at most 60 s."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if code.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            return
        time.sleep(0.02)
    pytest.fail(f"pid {pid} did not start {code!r} within 60 s")


@pytest.mark.slow
@linux_proc
def test_a_real_zombie_killed_by_sigsegv_is_read_from_outside() -> None:
    child = _child("import ctypes; ctypes.string_at(0)")
    try:
        _until_zombie(child)
        stat = process_stat(child.pid)
        assert stat is not None and stat.zombie and stat.signal == "SIGSEGV"
    finally:
        child.kill()
        child.wait(timeout=30)
    assert process_stat(child.pid) is None  # collected: gone from /proc


@pytest.mark.slow
@linux_proc
def test_an_uncollected_death_is_said_once_and_reported() -> None:
    said: list[str] = []
    watch = DeathWatch(say_after_s=10, say=said.append)
    code = "import sys, ctypes; sys.stdin.readline(); ctypes.string_at(0)"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        _until_running(child.pid, code)
        watch.saw(child.pid, 0.0)  # alive, its command line read
        assert child.stdin is not None
        child.stdin.write(b"crash now\n")
        child.stdin.flush()
        now = _until_zombie(child, watch)
        for later in (now, now + 1, now + 11, now + 12):  # the time is the watch's, not ours
            watch.saw(child.pid, later)
    finally:
        child.kill()
        child.communicate(timeout=30)  # collected, its stdin closed
    [death] = watch.deaths()
    assert (death.pid, death.signal, death.exit_code) == (child.pid, "SIGSEGV", None)
    assert code in death.command  # read while it lived
    assert death.uncollected_s == pytest.approx(12, abs=0.01)
    parent = death.parent_command
    shown = parent if len(parent) <= 80 else parent[:77] + "..."
    assert said == [
        f"loaderdoctor run: pid {child.pid} ({death.name}), started by pid {death.parent_pid} "
        f"({shown}), was killed by SIGSEGV 11 s ago and its parent has not collected it: a pool "
        "that waits for it waits for ever. The command runs on (Ctrl-C ends it); the report "
        "names this death."
    ]


@pytest.mark.slow
@linux_proc
@pytest.mark.parametrize(
    "code",
    [
        "import sys; sys.exit(0)",  # a clean exit, collected late: nothing to say
        # torch's DataLoader workers: their deaths are incidents, or torch's own error
        "import ctypes; ctypes.CDLL(None).prctl(15, b'pt_data_worker', 0, 0, 0); "
        "ctypes.string_at(0)",
    ],
    ids=["clean-exit", "dataloader-worker"],
)
def test_what_is_not_a_death_to_report(code: str) -> None:
    said: list[str] = []
    watch = DeathWatch(say_after_s=1, say=said.append)
    child = _child(code)
    try:
        now = _until_zombie(child, watch)
        for later in (now + 1, now + 5):
            watch.saw(child.pid, later)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert (watch.deaths(), said) == ([], [])


@pytest.mark.slow
@linux_proc
def test_a_death_collected_before_the_next_tick_is_not_reported() -> None:
    """A parent that watches its children collects a dead one at once (torch, our re-tries
    alone, a ProcessPoolExecutor): one sight of its zombie is no death to report."""
    watch = DeathWatch(say_after_s=0)
    child = _child("import ctypes; ctypes.string_at(0)")
    try:
        now = _until_zombie(child, watch)
    finally:
        child.kill()
        child.wait(timeout=30)
    watch.saw(child.pid, now + 1)
    assert watch.deaths() == []


def _report(deaths: list[ProcessDeath], incidents: list[Incident] | None = None) -> RunReport:
    return RunReport(
        status="crashed",
        command=["python", "train.py"],
        exit_code=143,
        duration_s=30.0,
        signal="SIGTERM",
        interrupted=True,
        incidents=incidents or [],
        process_deaths=deaths,
    )


DEATH = ProcessDeath(
    pid=4321,
    parent_pid=4300,
    name="python",
    command="",
    parent_command="python train.py",
    signal="SIGSEGV",
    exit_code=None,
    seen_s=1.5,
    uncollected_s=28.1,
    kernel_log=["[ 17.8] python[4321]: segfault at 0 ip 00007f error 4 in libc.so.6"],
)


def test_the_report_names_the_death_in_json_text_and_html() -> None:
    report = _report([DEATH])
    again = RunReport.from_json(report.to_json())
    assert again.process_deaths == [DEATH]
    text = format_text(report, width=200)
    assert (
        "    - pid 4321 (python), started by pid 4300 (python train.py): killed by SIGSEGV at "
        "1.5 s, still uncollected 28.1 s later" in text
    )
    assert "kernel: [ 17.8] python[4321]: segfault at 0" in text
    assert format_verdict(report) == (
        "verdict: no DataLoader worker died, but a process the command started did: pid 4321 "
        "(python) killed by SIGSEGV, never collected by its parent (pid 4300)"
    )
    page = format_html(report)
    assert "Processes that died outside the supervised DataLoaders" in page
    assert "python[4321]: segfault at 0" in page


def test_an_incident_that_ended_the_run_is_the_verdict_still() -> None:
    crash = Diagnosis("native-crash", "crashed", 0.9, 1, 4242, "SIGSEGV", None, [37], [], [])
    report = _report([DEATH], [Incident(crash, "raised")])
    assert format_verdict(report).startswith("verdict: native-crash: crashed")


def test_a_damaged_death_in_report_json_is_named() -> None:
    data = json.loads(_report([DEATH]).to_json())
    data["process_deaths"][0]["uncollected_s"] = "long"
    with pytest.raises(ValueError, match=r"process_deaths\[0\]\.uncollected_s"):
        RunReport.from_dict(data)


@pytest.mark.slow
@linux_proc
def test_a_torchdata_nodes_worker_killed_under_run_is_named(tmp_path: Path) -> None:
    pytest.importorskip("torchdata.nodes", reason="torchdata is an extra (the eco extra has it)")
    result = run_python(
        [
            "-m",
            "loaderdoctor",
            "run",
            "--report-dir",
            str(tmp_path / "report"),
            "--memory-interval",
            "0.1",
            "--",
            sys.executable,
            str(FIXTURES / "run" / "nodes_worker_crash.py"),
            "3",
        ],
        timeout=240,
    )
    assert result.returncode == 3, result.stderr[-3000:]
    assert "is dead and uncollected" in result.stdout
    report = RunReport.from_json((tmp_path / "report" / "report.json").read_text())
    [death] = report.process_deaths
    assert death.signal == "SIGSEGV" and death.uncollected_s > 0
    assert "nodes_worker_crash.py" in death.parent_command
    assert report.incidents == []
    assert result.stderr.rstrip().splitlines()[-1] == format_verdict(report)
    assert "never collected by its parent" in format_verdict(report)


def test_a_job_report_says_the_node_of_each_death(tmp_path: Path) -> None:
    from dataclasses import replace

    from loaderdoctor.runner.job import merge_job
    from test_run_nodes_units import node_report, write_job

    nodes = [replace(node_report(0, "crashed", 1), process_deaths=[DEATH]), node_report(1, "ok", 0)]
    job = merge_job(write_job(tmp_path, *nodes))
    assert job.process_deaths == [replace(DEATH, node="node0-h")]
    assert format_text(job, width=200).count("node0-h: pid 4321 (python), started by pid") == 1
