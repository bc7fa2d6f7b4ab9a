"""``loaderdoctor run`` on real commands: scripts, ``-m`` modules, spawn, torchrun ranks."""

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

pytestmark = pytest.mark.slow
RUN_FIXTURES = FIXTURES / "run"
TRAIN = str(RUN_FIXTURES / "train.py")


def ld_run(
    report_dir: Path, *args: str, timeout: float = 120, **kwargs
) -> tuple[subprocess.CompletedProcess[str], dict]:
    result = run_python(
        ["-m", "loaderdoctor", "run", "--report-dir", str(report_dir), *args],
        timeout=timeout,
        **kwargs,
    )
    path = report_dir / "report.json"
    assert path.is_file(), (
        f"no report.json\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-3000:]}"
    )
    return result, json.loads(path.read_text())


def causes(report: dict) -> list[tuple[str, list, int | None]]:
    return [(i["cause"], i["indices"], i["rank"]) for i in report["incidents"]]


def test_script_segfault_is_reported_with_its_sample(tmp_path: Path) -> None:
    result, report = ld_run(tmp_path, TRAIN, "segv")
    assert result.returncode == 1  # the command's own: WorkerDiedError ends the script
    assert report["schema"] == 1 and report["status"] == "crashed" and report["exit_code"] == 1
    assert causes(report) == [("native-crash", [21], None)]
    incident = report["incidents"][0]
    assert incident["action"] == "raised" and incident["signal"] == "SIGSEGV"
    assert incident["fixes"] and incident["evidence"] and incident["docs"]
    assert [r["loaders"] for r in report["ranks"]] == [1]
    assert 0 < report["delivered"]["batches"] < 10
    assert report["delivered"]["samples"] == 4 * report["delivered"]["batches"]
    assert "loaderdoctor run: the command failed: exit code 1 after " in result.stderr
    assert "native-crash" in result.stderr
    assert (tmp_path / "report.html").is_file()
    assert not (tmp_path / ".incidents").exists()


def test_python_m_module_sample_error(tmp_path: Path) -> None:
    result, report = ld_run(
        tmp_path / "r", "--", sys.executable, "-m", "train", "raise", cwd=str(RUN_FIXTURES)
    )
    assert result.returncode == 1
    assert report["status"] == "crashed"
    assert causes(report) == [("sample-error", [21], None)]
    assert report["command"][1:] == ["-m", "train", "raise"]


def test_spawn_workers(tmp_path: Path) -> None:
    result, report = ld_run(tmp_path, TRAIN, "raise", "spawn")
    assert result.returncode == 1
    assert causes(report) == [("sample-error", [21], None)]
    assert report["incidents"][0]["diagnosis"]["evidence"]


def test_torchrun_two_cpu_ranks(tmp_path: Path) -> None:
    result, report = ld_run(
        tmp_path,
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(RUN_FIXTURES / "ddp.py"),
        "segv",
        timeout=180,
    )
    assert result.returncode != 0 and report["status"] == "crashed"
    # DistributedSampler without shuffle gives rank 1 the odd indices: 21 is rank 1's.
    assert causes(report)[0] == ("native-crash", [21], 1)
    assert sorted(r["rank"] for r in report["ranks"]) == [0, 1]
    assert report["ranks"][1]["incidents"] >= 1


def test_clean_run_stdout_is_byte_identical(tmp_path: Path) -> None:
    plain = run_python([TRAIN, "clean"])
    result, report = ld_run(tmp_path, "--memory-interval", "0.1", TRAIN, "clean")
    assert plain.returncode == 0 and result.returncode == 0
    assert result.stdout == plain.stdout
    assert "loader class: torch.utils.data.dataloader.DataLoader" in plain.stderr
    assert "loader class: loaderdoctor.runner.patch.DataLoader" in result.stderr
    assert report["status"] == "ok" and report["incidents"] == []
    assert report["delivered"] == {"batches": 20, "samples": 80}  # 2 epochs × 10 batches of 4
    assert report["exit_code"] == 0 and report["quarantine"] == []
    # Short-lived workers may be missed by a sampler on a loaded machine; those seen were read.
    workers = [p for p in report["memory"]["processes"] if p["role"] == "worker"]
    assert all(p["peak_rss_bytes"] > 0 for p in workers)


def test_exit_by_signal_is_128_plus_n_and_still_reported(tmp_path: Path) -> None:
    result, report = ld_run(tmp_path, "--", "sh", "-c", "kill -TERM $$")
    assert result.returncode == 128 + signal.SIGTERM
    assert report["status"] == "crashed" and report["signal"] == "SIGTERM"
    assert report["exit_code"] == 143
    assert any("no supervised DataLoader" in note for note in report["notes"])


def test_interrupt_is_forwarded_and_the_report_written(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loaderdoctor",
            "run",
            "--report-dir",
            str(tmp_path),
            str(RUN_FIXTURES / "sleeper.py"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        line = process.stdout.readline()  # bounded by the sleeper's own 60 s
        assert line.strip() == "ready", line
        process.send_signal(signal.SIGINT)  # to `loaderdoctor run` only, as `kill -INT` would
        _, stderr = process.communicate(timeout=max(5.0, deadline - time.monotonic()))
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)
    assert process.returncode == 128 + signal.SIGINT, stderr  # the command died of the SIGINT
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] is True and report["status"] == "crashed"
    assert report["delivered"] == {"batches": 4, "samples": 8}


def test_missing_script_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = run_python(
        ["-m", "loaderdoctor", "run", "--report-dir", str(tmp_path), "no_such_script.py"]
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "loaderdoctor run: error: no such script: no_such_script.py"
    assert not (tmp_path / "report.json").exists()


def test_copy_on_read_growth_of_fork_workers(tmp_path: Path) -> None:
    result, report = ld_run(
        tmp_path, "--memory-interval", "0.2", str(RUN_FIXTURES / "cow.py"), timeout=180
    )
    assert result.returncode == 0, result.stderr[-2000:]
    findings = report["memory"]["findings"]
    assert [f["id"] for f in findings] == ["copy-on-read"], report["memory"]["processes"]
    assert len(findings[0]["pids"]) == 2
    assert "numpy" in findings[0]["fixes"][0]


def test_report_rerenders_a_run(tmp_path: Path) -> None:
    ld_run(tmp_path, TRAIN, "raise")
    (tmp_path / "report.html").unlink()
    result = run_python(["-m", "loaderdoctor", "report", str(tmp_path)])
    assert result.returncode == 1  # a crashed run is a finding
    assert "sample-error" in result.stdout and "the command failed" in result.stdout
    assert (tmp_path / "report.html").is_file()


def test_loaders_that_run_unsupervised_are_named_with_their_own_reason(tmp_path: Path) -> None:
    """The summary counts supervised loaders only; each one that ran as plain torchdata is in a
    note with the reason it gave itself (its warning's words), counted by reason."""
    pytest.importorskip("torchdata", reason="torchdata is an extra (the eco extra has it)")
    result, report = ld_run(tmp_path, str(RUN_FIXTURES / "stateful_kinds.py"), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    loaders = json.loads(result.stdout)
    assert [samples for samples, _ in loaders] == [list(range(8))] * 6
    from loaderdoctor.supervise.torchdata.plain import IN_PROCESS

    # iterable, in_order=False and map-style are supervised; num_workers=0 is plain torchdata
    assert [reason for _, reason in loaders] == [None] * 4 + [IN_PROCESS] * 2
    reasons: dict[str, int] = {}
    for _, reason in loaders:
        if reason is not None:
            reasons[reason] = reasons.get(reason, 0) + 1
    assert report["notes"] == [
        f"{count} DataLoader(s) ran unsupervised, their batches not in the delivered counts: "
        f"{reason}"
        for reason, count in reasons.items()
    ]
    supervised = sum(1 for _, reason in loaders if reason is None)
    assert [rank["loaders"] for rank in report["ranks"]] == [supervised]
    delivered = report["delivered"]
    plural = "s" if supervised != 1 else ""
    assert (
        f"  {delivered['batches']} batches, {delivered['samples']} samples delivered "
        f"({supervised} supervised DataLoader{plural})"
    ) in result.stderr.splitlines()
