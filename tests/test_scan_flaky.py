"""scan names a kill that follows its sample, and lists flaky samples."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch

from loaderdoctor.report.html.scan import format_html
from loaderdoctor.report.scan import format_json, format_text
from loaderdoctor.scan import scan_dataset
from loaderdoctor.scan.model import FlakySample, ScanReport

pytestmark = pytest.mark.slow


class Kills:
    """Sample 5 kills its own worker: every time, or with ``once`` (a flag file) the first time."""

    def __init__(self, once: str | None = None) -> None:
        self.once = once

    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 5:
            first = self.once is None or not os.path.exists(self.once)
            if self.once is not None and first:
                Path(self.once).touch()
            if first:
                os.kill(os.getpid(), signal.SIGKILL)
        return torch.tensor([index])


def test_a_kill_reproduced_alone_names_the_sample() -> None:
    # On main: "Something outside the worker killed it", Slurm and Kubernetes advice first.
    report = scan_dataset(Kills(), num_workers=2, timeout=60)
    [bad] = report.bad
    assert (bad.index, bad.cause) == (5, "killed-by-signal")
    assert bad.message == (
        "The sample kills its worker: the kill came again when it was re-tried alone"
    )
    assert bad.evidence[0] == (
        "re-tried alone in a fresh worker, sample 5 killed it again (SIGKILL): the failure "
        "follows the sample"
    )
    assert report.flaky == []


def test_a_sample_that_killed_a_worker_once_is_flaky(tmp_path: Path) -> None:
    # On main the scan said nothing about it (it showed only among the slowest).
    report = scan_dataset(Kills(once=str(tmp_path / "killed")), num_workers=2, timeout=60)
    assert report.bad == [] and report.scanned == 12
    [flaky] = report.flaky
    assert (flaky.index, flaky.cause, flaky.file) == (5, "killed-by-signal", None)
    assert flaky.message == "Something outside the worker killed it"
    # the re-try alone loaded it; the kernel log and the cgroup counters show no OOM kill, so an
    # outside kill, not the machine (where they cannot be read: the machine, until shown otherwise)
    outside = "no OOM kill in the kernel log or the cgroup counters" in flaky.evidence
    said = (
        "sample 5 loaded fine alone; killed from outside (no OOM kill in the kernel log or the "
        "cgroup counters): respawned, the pool keeps its size"
        if outside
        else "sample 5 loaded fine alone: the machine, not the sample"
    )
    assert said in flaky.evidence
    assert ScanReport.from_json(report.to_json()) == report


def flaky_report() -> ScanReport:
    return ScanReport(
        spec="data.py:train",
        total=12,
        scanned=12,
        bad=[],
        outliers=[],
        slowest=[],
        seconds=2.0,
        num_workers=2,
        flaky=[
            FlakySample(
                5,
                "killed-by-signal",
                "/d/5.jpg",
                "Something outside the worker killed it",
                ["worker 0 (pid 7) was killed by SIGKILL", "sample 5 loaded fine alone"],
            )
        ],
    )


def test_flaky_samples_in_text_json_and_html() -> None:
    report = flaky_report()
    assert format_text(report, width=100).splitlines()[:6] == [
        "scanned 12 samples in 2.0 s (6.0 samples/s, 2 workers): clean, 0 outliers, 1 flaky",
        "flaky samples (killed a worker once, loaded when re-tried alone)",
        "┏━━━━━━━┳━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓",
        "┃ index ┃ cause            ┃ file     ┃ message                                ┃",
        "┡━━━━━━━╇━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩",
        "│ 5     │ killed-by-signal │ /d/5.jpg │ Something outside the worker killed it │",
    ]
    assert json.loads(format_json(report))["flaky"] == [
        {
            "index": 5,
            "cause": "killed-by-signal",
            "file": "/d/5.jpg",
            "message": "Something outside the worker killed it",
            "evidence": ["worker 0 (pid 7) was killed by SIGKILL", "sample 5 loaded fine alone"],
        }
    ]
    html = format_html(report)
    assert (
        '<tr><td class="num">5</td><td><span class="cause">killed-by-signal</span></td>'
        "<td><code>/d/5.jpg</code></td><td>Something outside the worker killed it</td>"
        "<td><ul><li>worker 0 (pid 7) was killed by SIGKILL</li><li>sample 5 loaded fine alone"
        "</li></ul></td></tr>"
    ) in html
    assert "0 outlier(s) · 1 flaky · 2.0 s" in html
