"""Whose memory: an OOM kill is judged by who grew. The training process's own growth (its RSS
series the only large one) is named, and a worker the kernel killed for it says so; a fork
worker's growth of its own objects (RSS and private memory together) is not copy-on-read."""

from __future__ import annotations

import fnmatch
import json
import textwrap
from pathlib import Path

import pytest

from conftest import charged_baseline, in_cgroup, memory_cgroup, run_python
from loaderdoctor.forensics.incident import Incident
from loaderdoctor.report.run_text import format_verdict
from loaderdoctor.runner.memory import MiB, find_memory_growth, judge_oom_kills
from loaderdoctor.runner.model import (
    Delivered,
    MemoryReport,
    ProcessMemory,
    RunReport,
)


def process(
    pid: int, rss_mib: list[float], uss_mib: list[float] | None = None, **kw
) -> ProcessMemory:
    uss = uss_mib or [None] * len(rss_mib)
    series = [
        (0.5 * i, int(r * MiB), None if u is None else int(u * MiB), None)
        for i, (r, u) in enumerate(zip(rss_mib, uss))
    ]
    return ProcessMemory(pid=pid, series=series, **kw)


GROWING = [300, 360, 420, 480, 540, 600, 660]
FLAT = [300, 301, 300, 302, 301, 300, 301]


def trainer_and_workers() -> list[ProcessMemory]:
    return [
        process(100, GROWING, role="main"),
        process(101, [15] * 7, [5, 6, 5, 6, 5, 6, 5], role="worker", parent_pid=100),
        process(102, [15] * 7, [5, 5, 6, 5, 5, 6, 5], role="worker", parent_pid=100),
    ]


def test_the_training_processs_own_growth_is_named() -> None:
    (finding,) = find_memory_growth(trainer_and_workers())
    assert finding.id == "trainer-memory-growth"
    assert finding.pids == [100]
    assert finding.evidence == [
        "training process pid 100: RSS 300 MiB → 660 MiB over 3.0 s (+120.0 MiB/s, r² 1.00)"
    ]
    assert finding.fixes[0].startswith("Keep numbers, not tensors with their graphs")
    # a trainer that grows beside workers that grow as much is not singled out
    growing_workers = [
        process(100, GROWING, role="main"),
        process(101, GROWING, GROWING, role="worker", parent_pid=100),
    ]
    assert "trainer-memory-growth" not in [f.id for f in find_memory_growth(growing_workers)]


def test_a_worker_killed_for_the_trainers_growth_says_so() -> None:
    processes = trainer_and_workers()
    memory = MemoryReport(
        interval_s=0.5,
        samples=7,
        shm_total_bytes=None,
        shm_peak_used_bytes=None,
        processes=processes,
        findings=find_memory_growth(processes),
    )
    incident = Incident.from_dict(
        dict(
            cause="oom-killed",
            action="raised",
            worker_id=0,
            pid=101,
            signal="SIGKILL",
            evidence=["memory cgroup oom_kill counter: 0 -> 1"],
            fixes=["Lower num_workers"],
            title="The worker was killed by the OOM killer",
        )
    )
    report = RunReport(
        status="crashed",
        command=["python", "train.py"],
        exit_code=1,
        duration_s=4.0,
        incidents=[incident],
        delivered=Delivered(3, 12),
        memory=memory,
    )
    judge_oom_kills(report)
    assert incident.title == (
        "Out of memory: the training process grew, and the kernel killed a worker"
    )
    assert incident.evidence[:2] == [
        "whose memory: training process pid 100: RSS 300 MiB → 660 MiB over 3.0 s (+120.0 "
        "MiB/s, r² 1.00), the only large growth of the run; the workers stayed small",
        "OOM protection (the workers' oom_score_adj is raised above the training process's) "
        "made the kernel pick a worker: it died of the training process's growth",
    ]
    assert incident.fixes[0].startswith("Keep numbers, not tensors with their graphs")
    assert incident.fixes[-1] == "Lower num_workers"
    # the trainer itself killed: no worker died, and the verdict names its growth
    report.incidents, report.exit_code = [], 137
    assert format_verdict(report) == (
        "verdict: no DataLoader worker died; the training process's own memory grew (training "
        "process pid 100: RSS 300 MiB → 660 MiB over 3.0 s (+120.0 MiB/s, r² 1.00))"
    )


def test_a_fork_workers_own_cache_is_not_copy_on_read() -> None:
    # copy-on-read: private memory grows, RSS stays (shared pages become private)
    copied = [
        process(10, FLAT, [5, 20, 35, 50, 65, 80, 95], role="worker", start_method="fork"),
        process(11, FLAT, [5, 21, 36, 51, 66, 81, 96], role="worker", start_method="fork"),
    ]
    assert [f.id for f in find_memory_growth(copied)] == ["copy-on-read"]
    # a cache of the worker's own: RSS grows with it
    cached = [
        process(10, GROWING, [5, 65, 125, 185, 245, 305, 365], role="worker", start_method="fork"),
        process(11, GROWING, [6, 66, 126, 186, 246, 306, 366], role="worker", start_method="fork"),
    ]
    (finding,) = find_memory_growth(cached)
    assert finding.id == "worker-memory-growth"
    assert finding.explanation.startswith(
        "Each worker's resident memory (RSS) grows with its private memory, so this is not "
        "copy-on-read"
    )


TRAINER_LEAKS = textwrap.dedent(
    """
    import time

    import torch
    from torch.utils.data import DataLoader, Dataset


    class Small(Dataset):
        def __len__(self):
            return 1_000_000

        def __getitem__(self, index):
            time.sleep(0.005)
            return torch.zeros(4)


    history = []
    if __name__ == "__main__":
        for batch in DataLoader(Small(), batch_size=8, num_workers=2):
            history.append(torch.ones(2 << 20))  # 8 MiB kept every step: the training loop leaks
            time.sleep(0.1)
    """
)


@pytest.mark.slow
def test_a_real_oom_kill_of_a_worker_for_the_trainers_growth(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAINER_LEAKS)
    report_dir = tmp_path / "report"
    limit = charged_baseline("torch", "loaderdoctor") + 400 * MiB
    with memory_cgroup(limit) as group:
        result = run_python(
            ["-m", "loaderdoctor", "run", "--report-dir", str(report_dir), str(script)],
            wrapper=in_cgroup(group),
            timeout=300,
        )
    report = json.loads((report_dir / "report.json").read_text())
    # The kernel picks: a worker (its oom_score_adj raised), or the trainer itself when the
    # workers' whole charge is smaller than what their raise is worth at that moment. Each way,
    # the trainer's growth is what the report names.
    if report["incidents"]:
        causes = [incident["cause"] for incident in report["incidents"]]
        assert causes == ["oom-killed"], result.stdout + result.stderr
        evidence = report["incidents"][0]["evidence"]
        assert evidence[0].startswith("whose memory: training process pid "), evidence
        assert evidence[1].startswith("OOM protection (the workers' oom_score_adj is raised")
    else:
        assert report["exit_code"] == 137, result.stdout + result.stderr
        said = (result.stdout + result.stderr).splitlines()
        verdicts = [line.strip() for line in said if line.strip().startswith("verdict:")]
        assert fnmatch.filter(
            verdicts,
            "verdict: no DataLoader worker died; the training process's own memory grew "
            "(training process pid *: RSS * MiB → * MiB over * s (*))",
        ), result.stdout + result.stderr
