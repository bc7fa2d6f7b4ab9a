"""``loaderdoctor run`` in a hostile environment, for real: kill -9 at generated moments, a 1 MB
tmpfs that fills up, a read-only bind mount, two runs into one folder, a rank stopped by SIGTERM.

Mounts are made in a private mount namespace (``unshare -m``, root only): the test's mount is
gone with its namespace whatever happens, and nobody else's view of the disk changes. The
commands are shells where the case needs no DataLoader: ``run`` in front of them is the same.

``LOADERDOCTOR_KILL_MOMENTS=20`` (and ``LOADERDOCTOR_KILL_SEED``) runs the kill -9 test at more
moments than the default suite (2) can pay for; ``LOADERDOCTOR_KILL_COMMAND=torch`` kills a Python
command with a DataLoader instead of a shell (its own process writes the report when run dies).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loaderdoctor.cli import main
from loaderdoctor.runner.protocol import INCIDENTS_DIRNAME, REPORT_NAME

FIXTURES = Path(__file__).parent / "fixtures" / "run"
LD = [sys.executable, "-m", "loaderdoctor"]

needs_root_mounts = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a private mount namespace (unshare -m) and mount need root",
)


def ld(*args: str, timeout: float = 60, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LD, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,  # type: ignore[call-overload]
    )


def in_mount_namespace(script: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``script`` (sh) in a private mount namespace; skip where one cannot be made."""
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=10)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m: {probe.stderr.decode().strip()}")
    return subprocess.run(
        ["unshare", "-m", "sh", "-ec", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "LD": " ".join(LD)},
    )


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("loaderdoctor run: warning")]


# --- the report folder's disk -------------------------------------------------------------------
@pytest.mark.slow
@needs_root_mounts
def test_a_report_folder_that_fills_up_mid_run_never_changes_the_jobs_exit(tmp_path: Path) -> None:
    result = in_mount_namespace(
        f"mount -t tmpfs -o size=1m tmpfs {tmp_path}\n"
        f"$LD run --report-dir {tmp_path}/r -- "
        f"sh -c 'head -c 2000000 /dev/zero > {tmp_path}/fill 2>/dev/null; exit 7' || echo rc=$?\n"
        f"rm {tmp_path}/fill\n"
        f"$LD report --no-html {tmp_path}/r || echo report-rc=$?\n"
    )
    assert result.returncode == 0, result.stderr
    assert warnings_of(result.stderr) == [
        f"loaderdoctor run: warning: cannot write run.json in {tmp_path}/r (No space left on "
        "device); the command's outcome and exit status stay its own"
    ]
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "rc=7"  # the job's own exit code, not 3
    # once there is room again, the report says what run knew, and claims no exit status
    assert lines[1].startswith(
        "loaderdoctor run: loaderdoctor run did not finish, and nothing saw the command end"
    )
    assert lines[-1] == "report-rc=1"


@pytest.mark.slow
@needs_root_mounts
def test_a_full_or_read_only_report_folder_at_the_start_is_a_usage_error(tmp_path: Path) -> None:
    result = in_mount_namespace(
        f"mkdir {tmp_path}/full {tmp_path}/ro\n"
        f"mount -t tmpfs -o size=1m tmpfs {tmp_path}/full\n"
        f"head -c 2000000 /dev/zero > {tmp_path}/full/fill 2>/dev/null || true\n"
        f"mount --bind -o ro {tmp_path}/ro {tmp_path}/ro\n"
        f"$LD run --report-dir {tmp_path}/full/r -- true || echo rc=$?\n"
        f"$LD run --report-dir {tmp_path}/ro -- true || echo rc=$?\n"
    )
    assert result.stdout == "rc=2\nrc=2\n"
    assert result.stderr.splitlines() == [
        f"loaderdoctor run: error: --report-dir {tmp_path}/full/r: cannot write in it: No space "
        "left on device",
        f"loaderdoctor run: error: --report-dir {tmp_path}/ro: cannot write in it: Read-only "
        "file system",
    ]


@pytest.mark.slow
@needs_root_mounts
def test_a_report_folder_turned_read_only_mid_run(tmp_path: Path) -> None:
    result = in_mount_namespace(
        f"mkdir {tmp_path}/r\n"
        f"mount --bind {tmp_path}/r {tmp_path}/r\n"
        f"$LD run --report-dir {tmp_path}/r -- "
        f"sh -c 'mount -o remount,ro,bind {tmp_path}/r; exit 5' || echo rc=$?\n"
        f"$LD run --report-dir {tmp_path}/r -- true || echo rc=$?\n"
        f"$LD report --no-html {tmp_path}/r > /dev/null || echo report-rc=$?\n"
    )
    assert result.stdout == "rc=5\nrc=2\nreport-rc=1\n"
    assert warnings_of(result.stderr) == [
        f"loaderdoctor run: warning: cannot write run.json in {tmp_path}/r (Read-only file "
        "system); the command's outcome and exit status stay its own"
    ]
    assert result.stderr.splitlines()[-2:] == [
        f"loaderdoctor run: error: --report-dir {tmp_path}/r: an earlier run did not finish "
        "there, and its report cannot be written (Read-only file system): pass another "
        "--report-dir",
        f"loaderdoctor report: report.json not written in {tmp_path}/r (Read-only file system); "
        "shown from the run's records",
    ]


# --- one run per report folder -----------------------------------------------------------------
@pytest.mark.slow
def test_a_second_run_is_refused_and_a_dead_runs_folder_taken_over(tmp_path: Path) -> None:
    folder, started = tmp_path / "r", tmp_path / "started"
    first = subprocess.Popen(
        [*LD, "run", "--report-dir", str(folder), "--", "sh", "-c", f"touch {started}; sleep 30"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        second = ld("run", "--report-dir", str(folder), "--", "true")
        assert second.returncode == 2
        assert second.stderr.startswith(
            f"loaderdoctor run: error: --report-dir {folder} is in use by loaderdoctor run "
            f"(pid {first.pid}, started "
        )
        assert second.stderr.endswith("): wait for it to end, or pass another --report-dir\n")
        assert (folder / INCIDENTS_DIRNAME).is_dir()  # the first run's records untouched
        shell = psutil.Process(first.pid).children()
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        _, alive = psutil.wait_procs(shell, timeout=30)
        assert alive == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    third = ld("run", "--report-dir", str(folder), "--", "true")
    assert third.returncode == 0, third.stderr
    taken = third.stderr.splitlines()[0]
    assert taken.startswith(
        f"loaderdoctor run: an earlier run into {folder} did not finish; its report, made from "
        f"what it left, is kept in {folder}/earlier/"
    )
    (earlier,) = (folder / "earlier").iterdir()
    report = json.loads((earlier / REPORT_NAME).read_text())
    assert (report["exit_known"], report["supervisor"]) == (False, "died")
    assert json.loads((folder / REPORT_NAME).read_text())["status"] == "ok"


# --- a rank's counts --------------------------------------------------------------------------
@pytest.mark.slow
def test_a_ranks_counts_are_written_when_its_loader_stops_and_on_sigterm(tmp_path: Path) -> None:
    folder, marks = tmp_path / "r", tmp_path / "marks"
    marks.mkdir()
    run = subprocess.Popen(
        [*LD, "run", "--report-dir", str(folder), str(FIXTURES / "stop_then_sleep.py"), str(marks)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert _wait_for(marks / "stopped")
        states = list((folder / INCIDENTS_DIRNAME).glob("*.state.json"))
        counts = [json.loads(p.read_text()).get("batches") for p in states]
        assert counts == [5], "the first loader's five batches, written when its workers stopped"
        (marks / "go").touch()
        assert _wait_for(marks / "waiting")
        (rank,) = psutil.Process(run.pid).children()
        rank.send_signal(signal.SIGTERM)  # its launcher stops it: no atexit runs
        _, stderr = run.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
    assert run.returncode == 128 + signal.SIGTERM, stderr
    report = json.loads((folder / REPORT_NAME).read_text())
    assert report["delivered"] == {"batches": 12, "samples": 48}


def _wait_for(path: Path, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return path.exists()


# --- kill -9 of run at generated moments ------------------------------------------------------
KILL_MOMENTS = int(os.environ.get("LOADERDOCTOR_KILL_MOMENTS", "2"))
KILL_SEED = int(os.environ.get("LOADERDOCTOR_KILL_SEED", "5150"))
KILL_COMMAND = os.environ.get("LOADERDOCTOR_KILL_COMMAND", "sh")


@pytest.mark.slow
@pytest.mark.parametrize("moment", range(KILL_MOMENTS))
def test_kill_9_of_run_at_any_moment_leaves_a_true_report(tmp_path: Path, moment: int) -> None:
    rng = random.Random(KILL_SEED * 1000 + moment)
    replay = f"replay: LOADERDOCTOR_KILL_SEED={KILL_SEED} LOADERDOCTOR_KILL_COMMAND={KILL_COMMAND}"
    token, done, folder = f"ld-kill-{os.getpid()}-{moment}", tmp_path / "done", tmp_path / "r"
    if KILL_COMMAND == "torch":
        command = [sys.executable, str(FIXTURES / "kill_moments.py"), str(done), token]
        delay = rng.uniform(0.0, 6.0)
    else:  # the command ends with 3 unless run died first (the kernel's SIGTERM then ends it)
        command = ["sh", "-c", f": {token}; sleep 0.3; touch {done}; exit 3"]
        delay = rng.uniform(0.0, 1.5)
    run = subprocess.Popen(
        [*LD, "run", "--report-dir", str(folder), "--", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        time.sleep(delay)
        with contextlib.suppress(ProcessLookupError):
            os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
        orphans = _processes_with(token, wait_s=40)
        assert orphans == [], f"{orphans} outlived run killed at {delay:.3f} s; {replay}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        for process in _processes_with(token, wait_s=0):
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
    wrote = (folder / REPORT_NAME).exists() or (folder / INCIDENTS_DIRNAME).exists()
    shown = report_in_process(folder)
    if not wrote:  # killed before it wrote a thing: nothing to render, said in one line
        missing = (
            f"no report in {folder}: neither report.json nor node folders with one (a "
            "multi-node run writes one folder per node)"
            if folder.is_dir()  # only its lock: killed before the journal
            else f"no report at {folder}"  # killed before it made the folder
        )
        assert (shown.returncode, shown.stderr) == (
            2,
            f"loaderdoctor report: error: {missing}\n",
        ), replay
        return
    assert shown.returncode in (0, 1), f"{shown.stderr} (killed at {delay:.3f} s; {replay})"
    assert not (folder / INCIDENTS_DIRNAME).exists(), replay
    report = json.loads((folder / REPORT_NAME).read_text())
    if report["exit_known"]:  # a claimed exit status is the true one
        if KILL_COMMAND == "torch":
            expected = 0 if done.exists() else 128 + signal.SIGTERM
        else:
            assert done.exists(), f"exit {report['exit_code']} claimed, never reached; {replay}"
            expected = 3
        assert report["exit_code"] == expected, f"killed at {delay:.3f} s; {replay}"
    assert report["status"] != "ok" or done.exists(), replay


def report_in_process(folder: Path) -> subprocess.CompletedProcess[str]:
    """``loaderdoctor report --no-html FOLDER`` in this process (half a second less a moment)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["report", "--no-html", str(folder)])
    return subprocess.CompletedProcess([], code, out.getvalue(), err.getvalue())


def _processes_with(token: str, wait_s: float) -> list[psutil.Process]:
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for process in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if any(token in part for part in process.info["cmdline"] or []):
                    found.append(process)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)
