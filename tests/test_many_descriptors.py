"""A process holding more than 1024 descriptors loads as stock torch does, through every entry point.

``select()`` refuses any descriptor numbered 1024 or more; a training process often holds more
(torch's ``file_descriptor`` sharing strategy keeps one per received tensor, NCCL, datasets of open
files), so every pipe that loaderdoctor waits on, opened after them, is numbered above the limit.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

import loaderdoctor
from conftest import FIXTURES, run_python

pytestmark = pytest.mark.slow
MANY = str(FIXTURES / "dropin" / "many_descriptors.py")
SCAN = FIXTURES / "scan" / "scan_datasets.py"
DESCRIPTORS = 1100
EVERY_SAMPLE = list(range(20))
_NEEDS_TORCHDATA = pytest.mark.skipif(
    importlib.util.find_spec("torchdata") is None,
    reason="torchdata is an extra (the eco extra has it)",
)


@pytest.fixture
def many_descriptors() -> Iterator[None]:
    """This process holds ``DESCRIPTORS`` more open descriptors while the test runs."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < DESCRIPTORS + 100:
        pytest.skip(f"the hard RLIMIT_NOFILE is {hard}: cannot hold {DESCRIPTORS} descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held: list[int] = []
    try:
        held.extend(os.open(os.devnull, os.O_RDONLY) for _ in range(DESCRIPTORS))
        assert held[-1] > 1024
        yield
    finally:
        for descriptor in held:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def received(loader_class: type) -> tuple[list[int], list[str]]:
    """Every sample one epoch of a two-worker ``loader_class`` delivers, and the warnings it gave."""
    loader = loader_class(TensorDataset(torch.arange(20)), batch_size=4, num_workers=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        samples = sorted(int(value) for (batch,) in loader for value in batch)
    return samples, [f"{w.category.__name__}: {w.message}" for w in caught]


@pytest.mark.usefixtures("many_descriptors")
@pytest.mark.parametrize(
    ("stock", "ours"),
    [
        (torch.utils.data.DataLoader, loaderdoctor.DataLoader),
        pytest.param("torchdata", "torchdata", marks=_NEEDS_TORCHDATA),
    ],
    ids=["DataLoader", "StatefulDataLoader"],
)
def test_loader_delivers_every_sample_as_stock(stock: type | str, ours: type | str) -> None:
    if stock == "torchdata":  # an extra: resolved here, so that collecting needs no torchdata
        from torchdata.stateful_dataloader import StatefulDataLoader

        stock, ours = StatefulDataLoader, loaderdoctor.StatefulDataLoader
    assert isinstance(stock, type) and isinstance(ours, type)
    samples, stock_warnings = received(stock)
    assert samples == EVERY_SAMPLE
    assert received(ours) == (EVERY_SAMPLE, stock_warnings)


def test_run_of_a_command_holding_many_descriptors(tmp_path: Path) -> None:
    """Both ends hold them: ``run`` itself (its lifeline's pidfd) and the command it supervises."""
    report_dir = tmp_path / "report"
    command = ["--report-dir", str(report_dir), "--", sys.executable, MANY, "load"]
    result = run_python([MANY, "cli", "run", *command], timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == f"{EVERY_SAMPLE}\n"
    report = json.loads((report_dir / "report.json").read_text())
    assert (report["status"], report["incidents"], report["delivered"]) == (
        "ok",
        [],
        {"batches": 5, "samples": 20},
    )
    assert [rank["loaders"] for rank in report["ranks"]] == [1]


def test_scan_in_a_process_holding_many_descriptors(tmp_path: Path) -> None:
    out = tmp_path / "quarantine.json"
    command = [MANY, "cli", "scan", f"{SCAN}:clean", "--out", str(out), "--json"]
    result = run_python(command, timeout=120, env={"SCAN_TEST_LENGTH": "30"})
    assert (result.returncode, result.stderr) == (0, "")
    report = json.loads(result.stdout)
    assert (report["total"], report["scanned"], report["bad"]) == (30, 30, [])
    assert not out.exists()


def test_runs_lifeline_waits_on_a_descriptor_above_1024(tmp_path: Path) -> None:
    """A command under ``run`` watches ``run`` through a pidfd, opened after the command's own
    descriptors: here its parent is a shell that exits a second after the watch began."""
    ready, woke = tmp_path / "ready", tmp_path / "woke"
    script = (
        f'"$0" {MANY} lifeline {ready} {woke} & '
        f"for _ in $(seq 600); do [ -e {ready} ] && break; sleep 0.1; done; sleep 1"
    )
    # returns once the watcher has exited too: it holds the shell's stdout and stderr
    result = run_python([], wrapper=["sh", "-c", script], timeout=120)
    assert (result.returncode, result.stderr, woke.exists()) == (0, "", True)
