"""``loaderdoctor scan`` at scale: memory caps, crash storms, interrupted scans, torchrun shards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, default_sigint, run_python
from loaderdoctor.scan import scan_dataset
from loaderdoctor.scan.findings import profile
from loaderdoctor.scan.memcap import PREFIX
from loaderdoctor.scan.model import BadSample
from loaderdoctor.scan.state import (
    CheckpointError,
    Loaded,
    ScanState,
    load_checkpoint,
    save_checkpoint,
)
from loaderdoctor.system.cgroup import memory_cgroup
from test_scan import datasets

SCAN = FIXTURES / "scan" / "scan_datasets.py"


# --- units ------------------------------------------------------------------------------------
def _state() -> ScanState:
    state = ScanState("d.py:train", 10)
    state.loaded[0] = Loaded(0.5, "Tensor[float32](3,)", 4096)
    state.loaded[2] = Loaded(0.25, "Tensor[float32](3,)", 0)
    state.loaded[5] = Loaded(0.125, "Tensor[int64](2,)", 8192)
    state.bad[7] = BadSample(7, "native-crash", "/d/7.jpg", "crashed", ["SIGSEGV"])
    return state


def test_state_round_trips_and_stores_each_structure_once(tmp_path: Path) -> None:
    path = tmp_path / "scan.checkpoint.json"
    save_checkpoint(path, _state())
    data = json.loads(path.read_text())
    assert data["structures"] == ["Tensor[float32](3,)", "Tensor[int64](2,)"]
    assert load_checkpoint(path, "d.py:train", 10) == _state()


def test_merge_prefers_a_load_over_a_failure_elsewhere() -> None:
    ours, theirs = _state(), ScanState("d.py:train", 10)
    theirs.loaded[7] = Loaded(0.1, "Tensor[float32](3,)", 0)  # loaded on another rank's retry
    theirs.bad[9] = BadSample(9, "sample-error", None, "ValueError: x")
    ours.merge(theirs)
    assert sorted(ours.loaded) == [0, 2, 5, 7] and sorted(ours.bad) == [9]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda text: text.replace('"total": 10', '"total": 11'), "11 samples, this one has 10"),
        (lambda text: text[:20], "damaged"),
        (lambda text: text.replace('"d.py:train"', '"other.py:ds"'), "of other.py:ds, not"),
    ],
)
def test_a_checkpoint_of_another_scan_is_one_clear_error(tmp_path: Path, edit, message) -> None:
    path = tmp_path / "c.json"
    save_checkpoint(path, _state())
    path.write_text(edit(path.read_text()))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path, "d.py:train", 10)


def test_profile_is_bounded_and_keeps_each_buckets_worst() -> None:
    state = ScanState("", 1000)
    for index in range(0, 1000, 3):
        state.loaded[index] = Loaded(index / 1000, "x", index)
    shape = profile(state, points=100)
    assert shape is not None and shape.step == 10 and len(shape.seconds) == 100
    assert shape.seconds[0] == 0.009 and shape.peak_bytes[99] == 999
    empty = ScanState("", 10)
    empty.loaded[0] = Loaded(1.0, "x", 1)
    assert profile(empty, points=5).seconds == [1.0, None, None, None, None]  # type: ignore[union-attr]


# --- real workers -------------------------------------------------------------------------------
def _own_cgroup_leftovers() -> list[str]:
    directory = memory_cgroup().directory
    if directory is None:
        return []
    return [name for name in os.listdir(directory) if name.startswith(PREFIX)]


@pytest.mark.slow
def test_memory_cap_quarantines_exactly_the_samples_past_it() -> None:
    report = scan_dataset(datasets.Hungry(), num_workers=2, timeout=30, mem_limit=256 << 20)
    assert sorted(bad.index for bad in report.bad) == list(datasets.OOM_AT)
    if report.mem_cap and report.mem_cap.startswith("memory cgroup"):  # root with a memory cgroup
        assert {bad.cause for bad in report.bad} == {"oom-killed"}
        assert any("memory cap per worker: 256 MiB" in line for line in report.bad[0].evidence)
    else:  # the RLIMIT_AS fallback: the allocation raises MemoryError in the worker
        assert all("MemoryError" in bad.message for bad in report.bad)
    assert report.hungriest[0].index == datasets.HUNGRY_AT
    assert 100 << 20 < report.hungriest[0].peak_bytes < 200 << 20
    assert _own_cgroup_leftovers() == []


@pytest.mark.slow
def test_rlimit_fallback_turns_an_allocation_past_the_cap_into_memory_error() -> None:
    code = (
        "from loaderdoctor.scan.memcap import MemoryCap\n"
        "MemoryCap(128 << 20, None)(0)\n"
        "try:\n    bytearray(512 << 20)\nexcept MemoryError:\n    print('MemoryError')\n"
        "bytearray(16 << 20)\nprint('small ok')\n"
    )
    result = run_python(["-c", code], timeout=60)
    assert result.stdout.splitlines() == ["MemoryError", "small ok"], result.stderr


@pytest.mark.slow
def test_a_crash_storm_goes_on_in_fresh_rounds_and_names_every_crash() -> None:
    # 12 native crashes, more than max_deaths_in_a_row: each is named, and a round that stops
    # goes on in a fresh one.
    report = scan_dataset(datasets.Storm(), num_workers=2, timeout=30)
    assert sorted(bad.index for bad in report.bad) == list(datasets.STORM)
    assert {bad.cause for bad in report.bad} == {"native-crash"}
    assert report.scanned == 32 - len(datasets.STORM)


def _scan_command(out: Path, *extra: str) -> list[str]:
    return ["-m", "loaderdoctor", "scan", f"{SCAN}:logged", "--out", str(out), *extra]


@pytest.mark.slow
def test_an_interrupted_scan_resumes_without_fetching_again(tmp_path: Path) -> None:
    out, checkpoint = tmp_path / "q.json", tmp_path / "q.checkpoint.json"
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    env = {**os.environ, "SCAN_TEST_LENGTH": "600", "SCAN_TEST_LOG": str(first_log)}
    command = [sys.executable, *_scan_command(out, "--checkpoint-every", "0.2")]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
        preexec_fn=default_sigint,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if checkpoint.exists() and len(json.loads(checkpoint.read_text())["loaded"]) >= 40:
                break
            time.sleep(0.1)
        else:
            pytest.fail("no checkpoint with 40 samples within 60 s")
        process.send_signal(signal.SIGINT)  # Ctrl-C, to the scan alone
        _, stderr = process.communicate(timeout=60)
    finally:
        os.killpg(process.pid, signal.SIGKILL) if process.poll() is None else None
    assert process.returncode == 130, stderr
    assert "--resume" in stderr and "Traceback" not in stderr
    saved = json.loads(checkpoint.read_text())
    saved_indices = {row[0] for row in saved["loaded"]} | {bad["index"] for bad in saved["bad"]}
    assert 40 <= len(saved_indices) < 600

    refused = run_python(_scan_command(out), env={"SCAN_TEST_LENGTH": "600"}, timeout=60)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1

    resumed = run_python(
        [*_scan_command(out, "--resume"), "--json"],
        env={"SCAN_TEST_LENGTH": "600", "SCAN_TEST_LOG": str(second_log)},
        timeout=120,
    )
    assert resumed.returncode == 1, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["resumed"] == len(saved_indices) and report["total"] == 600
    assert sorted(bad["index"] for bad in report["bad"]) == [3, 150]
    fetched_again = {int(line) for line in second_log.read_text().split()}
    assert not fetched_again & saved_indices
    assert fetched_again | saved_indices == set(range(600))
    assert not checkpoint.exists()  # a completed scan removes its checkpoint
    assert sorted(json.loads(out.read_text())["quarantine"][i]["index"] for i in (0, 1)) == [3, 150]


@pytest.mark.slow
def test_resume_without_a_checkpoint_is_one_line(tmp_path: Path) -> None:
    result = run_python([*_scan_command(tmp_path / "q.json", "--resume")], timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"loaderdoctor scan: error: --resume: no checkpoint at {tmp_path / 'q.checkpoint.json'}; "
        "nothing to resume"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("option", "message"),
    [("lots", "not a size: 'lots'"), ("1M", "at least 32M"), ("-2G", "not a size: '-2G'")],
)
def test_bad_mem_limit_is_one_line(tmp_path: Path, option: str, message: str) -> None:
    result = run_python([*_scan_command(tmp_path / "q.json"), f"--mem-limit={option}"], timeout=60)
    assert result.returncode == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _kill_processes_naming(marker: str) -> None:
    import psutil

    for process in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in process.info["cmdline"] or []):
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass


@pytest.mark.slow
def test_torchrun_shards_the_scan_and_rank_zero_merges(tmp_path: Path) -> None:
    out = tmp_path / "q.json"
    try:
        result = run_python(
            [
            "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            "-m", "loaderdoctor", "scan", f"{SCAN}:planted", "--out", str(out), "--json",
        ],
            env={"SCAN_TEST_NO_HANG": "1", "OMP_NUM_THREADS": "1"},
            timeout=180,
            cwd=str(tmp_path),
        )  # fmt: skip
    finally:
        _kill_processes_naming(str(tmp_path))  # torchrun starts each rank in its own session
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)  # rank 0 alone prints
    assert report["ranks"] == 2 and report["total"] == datasets.LENGTH
    assert {bad["index"]: bad["cause"] for bad in report["bad"]} == {
        datasets.EXCEPTION_AT: "sample-error",
        datasets.CRASH_AT: "native-crash",
    }
    assert [outlier["index"] for outlier in report["outliers"]] == [datasets.ODD_AT]
    quarantined = [entry["index"] for entry in json.loads(out.read_text())["quarantine"]]
    assert quarantined == [datasets.EXCEPTION_AT, datasets.CRASH_AT]
    assert not list(tmp_path.glob("*.checkpoint.json*"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "/proc/q.json"], "cannot write /proc/q.json"),  # before scanning, not after
        (["--html", "/proc/x/scan.html"], "cannot write /proc/x/scan.html"),
        (["--checkpoint-every", "0"], "--checkpoint-every must be a positive"),
        (["--timeout", "nan"], "--timeout must be a positive number of seconds"),
        (["--checkpoint-every", "inf"], "--checkpoint-every must be a positive"),
        # Renamed over, a device or a pipe would be replaced (as root, /dev/null itself).
        (["--out", "fifo"], "cannot write fifo: not a regular file"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_up_front(
    tmp_path: Path,
    args: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The CLI's own main in this process: refused up front, nothing is scanned, so nothing
    # starts (a subprocess each, importing torch, cost six times more and proved no more).
    from loaderdoctor.cli import main

    os.mkfifo(tmp_path / "fifo")
    monkeypatch.chdir(tmp_path)
    try:
        code = main(["scan", f"{SCAN}:clean", *args])
    except SystemExit as exit:  # an argparse usage error
        code = exit.code
    stderr = capsys.readouterr().err
    assert (tmp_path / "fifo").is_fifo()
    assert code == 2 and message in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_an_empty_dataset_is_one_line(tmp_path: Path) -> None:
    result = run_python(
        ["-m", "loaderdoctor", "scan", f"{SCAN}:clean"], env={"SCAN_TEST_LENGTH": "0"},
        timeout=60, cwd=str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 2 and "has no samples" in result.stderr


@pytest.mark.slow
def test_a_scan_whose_samples_mostly_fail_alike_stops_and_writes_no_quarantine(
    tmp_path: Path,
) -> None:
    out = tmp_path / "q.json"
    result = run_python(
        ["-m", "loaderdoctor", "scan", f"{SCAN}:missing_root", "--out", str(out)], timeout=300
    )
    assert not out.exists(), result.stdout
    shared = [line for line in result.stdout.splitlines() if line.startswith("shared failure: ")]
    assert len(shared) == 1, result.stdout + result.stderr
    assert shared[0] == (
        "shared failure: 192 of the 200 samples tried failed the same way (FileNotFoundError: "
        "[Errno <n>] No such file or directory: '<path>'): the failure is shared, not the "
        "samples' (likely cause: a file root that does not exist (a wrong data path, an "
        "unmounted volume): every sample's file is missing); the scan stopped, and no "
        "quarantine file is written"
    )
