"""``loaderdoctor top``: the text view of a snapshot, bad input, and a real job watched from outside.

The real job runs under ``loaderdoctor run`` with its watchdog off, one worker stuck in sample 31
for good: ``top`` must show it slow, then hung once past ``--hung-after``, with its sample, and
leave the job as it was.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cli_terminal import plain, run_in_pty
from loaderdoctor.cli import main
from loaderdoctor.report.top import format_text
from loaderdoctor.top.model import LoaderView, ProcessView, TopSnapshot, WorkerView
from loaderdoctor.units import MiB

STUCK_INDEX = 31
JOB = f"""\
import time

import torch
from torch.utils.data import DataLoader, Dataset


class StuckAt(Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, index):
        if index == {STUCK_INDEX}:
            time.sleep(600)  # a read that never returns
        return torch.tensor([index])


if __name__ == "__main__":
    loader = DataLoader(StuckAt(), batch_size=2, num_workers=2)
    for batch in loader:
        time.sleep(0.01)
"""


def snapshot_of_two_workers() -> TopSnapshot:
    waiting = WorkerView(
        worker_id=0,
        pid=4242,
        state="waiting",
        state_for_s=1.25,
        rss_bytes=170 * MiB,
        cpu_percent=0.0,
        batches_per_s=0.0,
        typical_sample_s=0.02,
    )
    stuck = WorkerView(
        worker_id=1,
        pid=4243,
        state="fetching",
        in_flight_index=31,
        state_for_s=75.0,
        rss_bytes=171 * MiB,
        cpu_percent=0.5,
        batches_per_s=0.0,
        typical_sample_s=0.02,
        flag="hung",
    )
    slow = WorkerView(
        worker_id=0,
        pid=5000,
        state="fetching",
        in_flight_key="shard-3/item-17",
        state_for_s=4.5,
        rss_bytes=None,
        typical_sample_s=0.25,
        flag="slow",
    )
    train = LoaderView("train.py:40", 2, 60.0, [waiting, stuck], 0.0, 0.0, incidents=1)
    val = LoaderView("train.py:41", 1, None, [slow])
    idle = LoaderView("train.py:42", 4, 300.0)
    return TopSnapshot(
        report_dir="/runs/r1",
        run_pid=4000,
        command=["python", "train.py"],
        up_s=3725.0,
        interval_s=1.0,
        processes=[ProcessView(4100, 0, None, [train, val, idle], batches_delivered=15)],
        incidents=1,
        shm_used_bytes=64 * MiB,
        shm_total_bytes=1024 * MiB,
    )


def test_the_text_view_is_a_table_of_workers_per_loader() -> None:
    assert format_text(snapshot_of_two_workers()).splitlines() == [
        "loaderdoctor top: /runs/r1 (run pid 4000, up 1h02m) · 1 incident · /dev/shm 64.0 MiB "
        "of 1.0 GiB",
        "command: python train.py",
        "process 4100 (rank 0) · 15 batches delivered",
        "  loader train.py:40 · 2 workers · 0.0 batches/s · 0.0 samples/s · 1 incident · hung "
        "after 1m00s",
        "    worker  pid   state     sample  for    RSS        CPU %  batches/s",
        "    0       4242  waiting   -       1.2 s  170.0 MiB  0.0    0.0",
        "    1       4243  fetching  31      1m15s  171.0 MiB  0.5    0.0        HUNG (past 1m00s)",
        "  loader train.py:41 · 1 worker · 0 incidents · no hang watch",
        "    worker  pid   state     sample           for    RSS  CPU %  batches/s",
        "    0       5000  fetching  shard-3/item-17  4.5 s  -    -      -          "
        "SLOW (typical 0.2 s)",
        "  loader train.py:42 · 4 workers · 0 incidents · hung after 5m00s",
        "    no pool of workers running (between epochs, or not iterated)",
    ]


def test_the_json_view_says_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    from loaderdoctor.report.top import format_json

    data = json.loads(format_json(snapshot_of_two_workers()))
    stuck = data["processes"][0]["loaders"][0]["workers"][1]
    assert data["schema"] == 1
    assert stuck == {
        "worker_id": 1,
        "pid": 4243,
        "state": "fetching",
        "in_flight_index": 31,
        "in_flight_key": None,
        "in_flight_file": None,
        "state_for_s": 75.0,
        "rss_bytes": 171 * MiB,
        "cpu_percent": 0.5,
        "batches_per_s": 0.0,
        "batches_done": 0,
        "samples_started": 0,
        "typical_sample_s": 0.02,
        "flag": "hung",
    }


# --- the parts, alone ----------------------------------------------------------------------------
def test_a_table_read_from_outside_is_the_recorders_own() -> None:
    from loaderdoctor.recorder import FlightRecorder, TableReader

    recorder = FlightRecorder(2)
    for worker_id in range(2):
        recorder.reset_slot(worker_id)
    slot = recorder.attach(1)
    slot.fetching(31)
    slot.name_item(7, "item-7", "shard-0.tar")
    location = recorder.location()
    assert location is not None and location.fd is not None and location.path is None
    reader = TableReader(os.getpid(), location)
    try:
        for worker_id in range(2):
            ours, theirs = recorder.snapshot(worker_id), reader.snapshot(worker_id)
            assert (ours.pid, ours.stage, ours.in_flight_index, ours.named_key) == (
                theirs.pid,
                theirs.stage,
                theirs.in_flight_index,
                theirs.named_key,
            )
        assert (theirs.pid, theirs.stage, theirs.in_flight_index) == (os.getpid(), "fetch", 31)
        assert (theirs.named_position, theirs.named_url, theirs.generation) == (7, "shard-0.tar", 1)
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("state", "age", "typical", "hang_after", "flag"),
    [
        ("fetching", 0.9, 0.01, None, None),  # far past its typical time, but under a second
        ("fetching", 1.0, 0.01, None, "slow"),
        ("fetching", 4.9, 0.5, None, None),  # under ten times its typical time
        ("collating", 5.0, 0.5, None, "slow"),
        ("fetching", 60.0, 0.01, 60.0, "hung"),
        ("starting", 60.0, None, 60.0, "hung"),  # stuck in its worker_init_fn
        ("waiting", 600.0, 0.01, 60.0, None),  # waiting for an index is no hang
        ("fetching", 5.0, None, None, None),  # nothing to compare with
    ],
)
def test_a_sample_is_slow_far_past_its_workers_typical_time_and_hung_past_the_threshold(
    state: str, age: float, typical: float | None, hang_after: float | None, flag: str | None
) -> None:
    from loaderdoctor.top.watch import _flag

    worker = WorkerView(0, 4242, state, state_for_s=age, typical_sample_s=typical)
    assert _flag(worker, hang_after) == flag


def test_a_multi_node_job_is_found_by_its_folder_with_every_node(tmp_path: Path) -> None:
    from loaderdoctor.top.find import find_job

    for node in ("node0-a", "node1-b"):
        incidents = tmp_path / node / ".incidents"
        incidents.mkdir(parents=True)
        record = {"pid": os.getpid(), "command": ["torchrun"], "started_wall": 1.0, "node": {}}
        record["node"] = {"name": node}
        (incidents / "run.json").write_text(json.dumps(record))
    (tmp_path / "earlier").mkdir()
    job = find_job(str(tmp_path))
    assert (job.report_dir, job.run_pid, job.command) == (tmp_path, os.getpid(), ["torchrun"])
    assert job.folders == [("node0-a", tmp_path / "node0-a"), ("node1-b", tmp_path / "node1-b")]
    assert find_job(str(tmp_path / "node1-b")).folders == [(None, tmp_path / "node1-b")]


# --- bad input: one line, exit 2 --------------------------------------------------------------
def unused_pid() -> int:
    with open("/proc/sys/kernel/pid_max") as handle:
        pid = int(handle.read()) - 1
    while psutil.pid_exists(pid):
        pid -= 1
    return pid


@pytest.mark.parametrize(
    ("case", "line"),
    [
        ("empty", "no loaderdoctor run job in {dir}: start it with: loaderdoctor run -- COMMAND"),
        ("finished", "no running job in {dir}: its run has ended (loaderdoctor report {dir} "),
        ("missing", "no such folder: {dir} (give a job's --report-dir, or its pid)"),
        ("dead-pid", "no process {pid}: it has ended (or give the job's --report-dir)"),
        ("not-under-run", "process {me} is not running under loaderdoctor run: start it with"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, line: str
) -> None:
    folder = tmp_path / ("missing" if case == "missing" else "run")
    if case != "missing":
        folder.mkdir()
    if case == "finished":
        (folder / "report.json").write_text("{}")
    pid = unused_pid()
    target = {"dead-pid": str(pid), "not-under-run": str(os.getpid())}.get(case, str(folder))
    assert main(["top", target, "--once"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(
        "loaderdoctor top: error: " + line.format(dir=folder, pid=pid, me=os.getpid())
    )
    assert err.count("\n") == 1


# --- a real job -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stuck_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    """(report dir, stuck worker's pid) of a job under ``run`` whose sample 31 never loads."""
    from loaderdoctor.top.find import find_job
    from loaderdoctor.top.watch import Watcher

    folder = tmp_path_factory.mktemp("top-job")
    (folder / "job.py").write_text(JOB)
    report_dir = folder / "report"
    command = [sys.executable, "-m", "loaderdoctor", "run", "--hang-timeout", "0"]
    process = subprocess.Popen(
        [*command, "--report-dir", str(report_dir), "--", sys.executable, "job.py"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # Imported while the job starts, not by the slow tier's own fixture (conftest) once the
        # stuck sample's clock runs
        import torch.utils.data.dataloader  # noqa: F401

        deadline = time.monotonic() + 60
        stuck_pid = None
        while stuck_pid is None:
            assert time.monotonic() < deadline, "the job never reached its stuck sample"
            assert process.poll() is None, "the job ended"
            time.sleep(0.2)
            if not (report_dir / ".incidents" / "run.json").exists():
                continue
            watcher = Watcher(find_job(str(report_dir)))
            try:
                snapshot = watcher.snapshot(interval_s=0)
            finally:
                watcher.close()
            for proc in snapshot.processes:
                for loader in proc.loaders:
                    for worker in loader.workers:
                        if worker.state == "fetching" and worker.in_flight_index == STUCK_INDEX:
                            stuck_pid = worker.pid
        yield report_dir, stuck_pid
        assert process.poll() is None, "the job ended while watched"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def stuck_for_s(report_dir: Path, pid: int) -> float:
    """How long the worker ``pid`` has been on its sample, as top sees it."""
    from loaderdoctor.top.find import find_job
    from loaderdoctor.top.watch import Watcher

    watcher = Watcher(find_job(str(report_dir)))
    try:
        snapshot = watcher.snapshot(interval_s=0)
    finally:
        watcher.close()
    (seconds,) = [
        worker.state_for_s
        for proc in snapshot.processes
        for loader in proc.loaders
        for worker in loader.workers
        if worker.pid == pid
    ]
    return seconds


@pytest.mark.slow
def test_json_shows_the_stuck_worker_slow_then_hung_with_its_sample(
    stuck_job: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    report_dir, stuck_pid = stuck_job
    # The threshold lies ahead of the stuck clock whichever test of the module runs first
    hung_after = float(math.ceil(stuck_for_s(report_dir, stuck_pid)) + 2)
    args = ["top", str(report_dir), "--json", "--interval", "0.3", "--hung-after", str(hung_after)]
    flags: list[tuple[str | None, float]] = []
    deadline = time.monotonic() + 30
    while not flags or flags[-1][0] != "hung":
        assert time.monotonic() < deadline, flags
        assert main(args) == 0
        data = json.loads(capsys.readouterr().out)
        (process,) = data["processes"]
        (loader,) = process["loaders"]
        assert loader["site"] == "job.py:18"
        assert loader["num_workers"] == 2
        (stuck,) = [w for w in loader["workers"] if w["pid"] == stuck_pid]
        assert (stuck["state"], stuck["in_flight_index"]) == ("fetching", STUCK_INDEX)
        flags.append((stuck["flag"], stuck["state_for_s"]))
    assert loader["hang_after_s"] == hung_after
    assert "slow" in [flag for flag, _ in flags]  # highlighted before it is hung
    # shown hung within 2 s of the threshold
    assert hung_after <= flags[-1][1] < hung_after + 2, flags


@pytest.mark.slow
def test_a_terminal_shows_the_hung_worker_highlighted_and_detaching_leaves_the_job(
    stuck_job: tuple[Path, int],
) -> None:
    report_dir, stuck_pid = stuck_job
    deadline = time.monotonic() + 30
    while stuck_for_s(report_dir, stuck_pid) < 2.5:  # past the threshold below in every frame
        assert time.monotonic() < deadline
        time.sleep(0.2)
    shown = run_in_pty(
        [
            *("-m", "loaderdoctor", "top", str(report_dir)),
            *("--count", "2", "--interval", "0.3", "--hung-after", "2"),
        ],
        columns=140,
        timeout=30,
    )
    assert shown.returncode == 0, shown.stdout
    rows = [line for line in plain(shown.stdout).splitlines() if f"{stuck_pid} " in line]
    assert rows, shown.stdout
    for row in rows:
        assert row.split()[1:4] == [str(stuck_pid), "fetching", "31"]
        assert row.endswith("HUNG (past 2.0 s)")
    assert "\x1b[1;31m" in shown.stdout  # bold red: the row is highlighted
    assert psutil.Process(stuck_pid).is_running()
