"""``loaderdoctor tune`` end to end: the real CLI in a subprocess, on small real datasets."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import json
import os
import re
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import charged_baseline, in_cgroup, memory_cgroup, run_python
from loaderdoctor.tune import LoaderConfig, SearchSettings, Trial
from loaderdoctor.tune.budget import MARGIN_FRACTION, MARGIN_MIN_BYTES
from loaderdoctor.tune.search import pick_from
from loaderdoctor.units import format_bytes

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


    class TwoBad(Dataset):
        '''Samples 3 and 7 raise, as a truncated JPEG would.'''

        def __len__(self):
            return 200

        def __getitem__(self, index):
            if index in (3, 7):
                raise OSError(f"image file is truncated: {index}.jpg")
            return torch.full((16,), float(index))


    two_bad = TwoBad()


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
        env={"LOADERDOCTOR_PROGRESS_INTERVAL": "3600"},  # a progress line every hour: none
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == 1 and data["batch_size"] == 8
    assert {t["config"]["num_workers"] for t in data["trials"]} <= {0, 1, 2}
    assert data["trials"][0]["config"]["num_workers"] == 0
    assert all(t["samples_per_s"] > 0 for t in data["trials"] if t["status"] == "ok")
    # Which configuration wins depends on the load (at load 21 no worker count beat 0 workers
    # once): what holds under any load is that the recommendation is the search's pick from the
    # measurements in the report. That workers win for waiting samples is the search's unit
    # test on recorded rates (test_tune.py: test_proportional_scaling_probes_nothing_below_the_top).
    trials = [Trial.from_dict(t) for t in data["trials"]]
    pick, rate = pick_from(trials, SearchSettings(2))
    recommended = LoaderConfig(**data["recommended"])
    assert dataclasses.replace(recommended, persistent_workers=False) == pick
    assert data["recommended_samples_per_s"] == rate
    startup = data["startup"]  # None at 0 workers
    assert recommended.persistent_workers == bool(startup and startup["recommend_persistent"])
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


@pytest.mark.slow
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


HUNGRY_BYTES = 150 * MiB  # what each process that fetches a Hungry sample keeps
WORKER_BYTES = 175 * MiB  # a Hungry worker's private memory: the cache and a fork worker's own


def budget_for_workers(workers: float, floor: int) -> int:
    """A memory cgroup limit whose tune budget (the limit minus its margin) holds the main process
    (``floor`` plus its own Hungry cache, from the 0-worker trial) and ``workers`` workers."""
    need = floor + HUNGRY_BYTES + int(workers * WORKER_BYTES)
    return max(need + MARGIN_MIN_BYTES, int(need / (1 - MARGIN_FRACTION)) + 1)


@contextlib.contextmanager
def another_jobs_shared_memory(size: int, period_s: float) -> Iterator[None]:
    """Another job on the machine (outside the test's cgroup) that fills ``size`` bytes of
    /dev/shm and frees them again every ``period_s``, as the other sessions of a shared machine
    do: a trial that reads /dev/shm's machine-wide use sees its memory come and go."""
    path = Path("/dev/shm") / f"loaderdoctor-test-other-job-{os.getpid()}"
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            with open(path, "wb") as handle:
                for _ in range(size // MiB):
                    handle.write(b"x" * MiB)
            stop.wait(period_s / 2)
            path.unlink(missing_ok=True)
            stop.wait(period_s / 2)

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
        path.unlink(missing_ok=True)


@pytest.mark.slow
@pytest.mark.root
def test_the_cgroup_budget_is_respected(datasets: Path) -> None:
    """In a memory cgroup with room for about 2.5 Hungry workers: no process is OOM-killed and
    no trial ends over the budget: the budget counts what the cgroup counts, once (not
    /dev/shm's machine-wide use, not the page cache of torch's libraries, not a batch twice).
    Each trial's workers run in a child cgroup limited to the budget less the main process."""
    floor = charged_baseline(
        "torch", "rich", "loaderdoctor.cli.tune", "loaderdoctor.tune", datasets.stem,
        path=[datasets.parent],
    )  # fmt: skip
    limit = budget_for_workers(2.5, floor)
    with memory_cgroup(limit) as group, another_jobs_shared_memory(400 * MiB, period_s=0.4):
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
        left = [child.name for child in group.iterdir() if child.is_dir()]
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    budget = data["budget"]["memory_bytes"]
    assert f"cgroup v1 limit {format_bytes(limit)} minus a" in data["budget"]["source"]
    assert budget < limit
    assert data["memory_limit"] is not None
    assert left == []  # every trial's cgroup removed
    # The kernel holds each trial's workers to the budget less what the main process held:
    # none ends over it (the kernel's own count of the workers beside the main process's
    # peak; the watcher's estimate of a worker between two reads may be high, and stops
    # nothing here), and none of tune's processes is OOM-killed by the job's limit (below).
    for trial in data["trials"]:
        assert trial["status"] in ("ok", "does-not-fit"), trial
        if trial["config"]["num_workers"]:
            assert trial["cgroup_peak_bytes"] <= trial["cgroup_limit_bytes"] < budget, trial
            assert trial["main_peak_bytes"] + trial["cgroup_peak_bytes"] <= limit, trial
    within = [t["config"] for t in data["trials"] if t["status"] == "ok"]
    pick = data["recommended"]
    assert (pick["num_workers"], pick["prefetch_factor"]) in {
        (c["num_workers"], c["prefetch_factor"]) for c in within
    }
    ran = {c["num_workers"] for c in within}
    assert 0 in ran and 1 in ran and 2 in ran
    # 4 workers need 1.5 workers' memory more than the budget holds: even half a worker below
    # the prediction is over it, so they are never started
    skipped = data["skipped"]
    assert skipped, "a configuration certainly over the budget should have been skipped"
    assert 4 in {item["config"]["num_workers"] for item in skipped}
    for item in skipped:
        assert item["predicted_bytes"] > budget and "memory budget" in item["reason"]
    # each worker really held its 150 MiB: the prediction was not a lucky underestimate
    workers = [max(t["worker_peak_bytes"]) for t in data["trials"] if t["worker_peak_bytes"]]
    assert min(workers) > 140 * MiB
    kills = dict(line.split() for line in oom_control.splitlines()).get("oom_kill", "0")
    assert kills == "0", oom_control


@pytest.mark.slow
def test_nothing_fits_says_what_the_smallest_needs_and_exits_1(datasets: Path) -> None:
    result = tune(f"{datasets}:waiting", "--batch-size", "8", "--mem-budget", "10M")
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.splitlines()
    need = re.fullmatch(
        r"loaderdoctor tune: nothing fits the memory budget of 10\.0 MiB: the smallest "
        r"configuration \(workers=0\) needs about ([0-9.]+) MiB; raise --mem-budget, or lower "
        r"--batch-size or the dataset's memory",
        line,
    )
    assert need is not None, line
    assert float(need.group(1)) > 10
    assert "recommended" not in result.stdout and "DataLoader(" not in result.stdout
    assert result.stdout.splitlines()[-1] == line.removeprefix("loaderdoctor tune: ")


@pytest.mark.slow
def test_tune_leaves_out_the_quarantined_samples(datasets: Path, tmp_path: Path) -> None:
    refused = tune(f"{datasets}:two_bad", "--batch-size", "8")
    assert refused.returncode == 2
    assert refused.stderr == (
        "loaderdoctor tune: error: the dataset or collate_fn fails in the main process: "
        "OSError: image file is truncated: 3.jpg (loaderdoctor scan "
        f"{datasets}:two_bad --out quarantine.json names the bad samples; then tune with "
        "--quarantine quarantine.json)\n"
    )
    quarantine = tmp_path / "quarantine.json"
    quarantine.write_text(json.dumps({"schema": 1, "quarantine": [{"index": 3}, 7]}))
    args = ["--batch-size", "8", "--max-workers", "1", "--window", "0.2", "--json"]
    result = tune(f"{datasets}:two_bad", "--quarantine", str(quarantine), *args)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["dataset_length"] == 198
    assert report["trials"] and all(t["status"] == "ok" for t in report["trials"])

    missing = tune(f"{datasets}:two_bad", "--quarantine", str(tmp_path / "no.json"), *args)
    assert (missing.returncode, missing.stderr) == (
        2,
        f"loaderdoctor tune: error: --quarantine {tmp_path / 'no.json'}: no such file "
        "(loaderdoctor scan --out writes it)\n",
    )
