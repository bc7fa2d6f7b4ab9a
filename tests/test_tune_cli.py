"""``loaderdoctor tune`` end to end: the real CLI in a subprocess, on small real datasets."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from conftest import in_cgroup, memory_cgroup, run_python

MiB = 1024 * 1024

DATASETS = textwrap.dedent(
    """
    import os
    import time

    import torch
    from torch.utils.data import Dataset


    class Waiting(Dataset):
        '''1 ms of waiting per sample: workers help, even past the cores.'''

        def __len__(self):
            return 400

        def __getitem__(self, index):
            time.sleep(0.001)
            return torch.full((16,), float(index))


    class Hungry(Dataset):
        '''Every process that fetches a sample holds its own 150 MiB (a per-process cache).'''

        def __init__(self):
            self.owner = None

        def __len__(self):
            return 400

        def __getitem__(self, index):
            if self.owner != os.getpid():
                self.owner = os.getpid()
                self.cache = torch.ones(150 * 1024 * 1024, dtype=torch.uint8)  # touched pages
            time.sleep(0.002)
            return torch.full((16,), float(index))


    def pad(samples):
        return torch.stack(samples)


    waiting = Waiting()
    """
)


@pytest.fixture
def datasets(tmp_path: Path) -> Path:
    path = tmp_path / "tune_datasets.py"
    path.write_text(DATASETS, encoding="utf-8")
    return path


def tune(*args: str, timeout: float = 60, **kwargs: object):  # type: ignore[no-untyped-def]
    return run_python(["-m", "loaderdoctor", "tune", *args], timeout=timeout, **kwargs)  # type: ignore[arg-type]


@pytest.mark.slow
def test_json_report_snippet_plot_and_soak(datasets: Path, tmp_path: Path) -> None:
    plot = tmp_path / "tune.html"
    result = tune(
        f"{datasets}:waiting",
        "--batch-size", "8",
        "--collate", f"{datasets}:pad",
        "--max-workers", "2",
        "--window", "0.3",
        "--time-budget", "15",
        "--soak", "2",
        "--json",
        "--plot", str(plot),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == 1 and data["batch_size"] == 8
    assert {t["config"]["num_workers"] for t in data["trials"]} <= {0, 1, 2}
    assert data["trials"][0]["config"]["num_workers"] == 0
    assert all(t["samples_per_s"] > 0 for t in data["trials"] if t["status"] == "ok")
    assert data["recommended"]["num_workers"] >= 1  # waiting samples: workers help
    assert data["bound"]["id"] in {"io-latency", "main-process", "compute", "transfer"}
    tree = ast.parse(data["snippet"])
    call = tree.body[0].value  # type: ignore[attr-defined]
    keywords = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg != "collate_fn"}
    assert keywords == data["dataloader_kwargs"]
    assert "collate_fn=pad," in data["snippet"]
    assert len(data["soak"]["epochs"]) == 2
    assert data["soak"]["mean_samples_per_s"] > 0
    assert plot.read_text().count("<svg") == 2
    assert result.stderr == ""  # no progress bar (not a terminal), no torch warnings


@pytest.mark.slow
def test_text_report_and_png(datasets: Path, tmp_path: Path) -> None:
    plot = tmp_path / "tune.png"
    result = tune(
        f"{datasets}:Waiting",
        "--batch-size", "8",
        "--max-workers", "1",
        "--window", "0.2",
        "--plot", str(plot),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "measured: steady-state samples/s" in result.stdout
    assert "\nloader = DataLoader(\n    dataset,\n    batch_size=8,\n" in result.stdout
    assert result.stdout.endswith(f")\nplot written to {plot}\n")
    assert plot.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py:data", "--batch-size", "8"], "no such file: missing.py"),
        (["{datasets}:waiting", "--batch-size", "0"], "--batch-size must be at least 1"),
        (["{datasets}:waiting", "--batch-size", "8", "--mem-budget", "lots"], "not a size"),
        (["{datasets}:waiting", "--batch-size", "8", "--plot", "t.pdf"], "--plot takes"),
        (["{datasets}:nothing", "--batch-size", "8"], "has no name 'nothing'"),
        (
            ["{datasets}:waiting", "--batch-size", "8", "--collate", "{datasets}:waiting"],
            "not a function",
        ),
        (["data_without_name", "--batch-size", "8"], "not a dataset spec"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    datasets: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    result = tune(*(a.format(datasets=datasets) for a in args), cwd=str(tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loaderdoctor tune: error: "), lines
    assert message in lines[0]


@pytest.mark.slow
@pytest.mark.root
def test_the_cgroup_budget_is_respected(datasets: Path) -> None:
    """In a 1 GiB memory cgroup, workers of 150 MiB each: 4 workers would not fit, never run."""
    with memory_cgroup(1024 * MiB) as group:
        result = tune(
            f"{datasets}:Hungry",
            "--batch-size", "8",
            "--max-workers", "8",
            "--window", "0.3",
            "--json",
            wrapper=in_cgroup(group),
            timeout=90,
        )  # fmt: skip
        oom_control = (group / "memory.oom_control").read_text()
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    budget = data["budget"]["memory_bytes"]
    assert "cgroup v1 limit 1.0 GiB" in data["budget"]["source"]
    assert budget < 1024 * MiB
    for trial in data["trials"]:
        assert trial["predicted_bytes"] <= budget, trial
        assert trial["status"] == "ok", trial
    ran = {t["config"]["num_workers"] for t in data["trials"]}
    assert 0 in ran and 1 in ran
    skipped = data["skipped"]
    assert skipped, "a configuration over the budget should have been skipped"
    for item in skipped:
        assert item["predicted_bytes"] > budget and "memory budget" in item["reason"]
        assert item["config"]["num_workers"] not in ran or item["config"]["prefetch_factor"] != 2
    assert max(ran) < min(s["config"]["num_workers"] for s in skipped)
    # each worker really held its 150 MiB: the prediction was not a lucky underestimate
    workers = [max(t["worker_peak_bytes"]) for t in data["trials"] if t["worker_peak_bytes"]]
    assert min(workers) > 140 * MiB
    kills = dict(line.split() for line in oom_control.splitlines()).get("oom_kill", "0")
    assert kills == "0", oom_control
