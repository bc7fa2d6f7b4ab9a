"""``loaderdoctor tune`` under the kernel's memory limit: a real OOM kill in a trial's own cgroup."""

from __future__ import annotations

import json
import os
import re
import signal
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import own_memory_cgroup_v1, run_python

MiB = 1024 * 1024

GREEDY = textwrap.dedent(
    """
    import time

    import torch
    from torch.utils.data import Dataset, get_worker_info


    class Greedy(Dataset):
        '''Workers 2 and up each hold 1 GiB once they fetch: one or two workers look cheap,
        and a line through them puts three and four well inside a budget they overshoot.'''

        def __len__(self):
            return 400

        def __getitem__(self, index):
            info = get_worker_info()
            if info is not None and info.id >= 2 and not hasattr(self, "cache"):
                self.cache = torch.ones(1024 * 1024 * 1024, dtype=torch.uint8)  # touched pages
            time.sleep(0.002)
            return torch.full((16,), float(index))
    """
)
# The main process holds 150 MiB (torch's CPU build) to 550 MiB (its CUDA build) of it: two
# cheap workers fit beside it, one greedy worker does not.
BUDGET = 1024 * MiB


def leftovers(parent: Path) -> list[str]:
    """Children of ``parent`` that tune made and a process no longer alive left behind."""
    found = []
    for child in parent.glob("loaderdoctor-limit-*"):
        match = re.fullmatch(r"loaderdoctor-limit-(\d+)-\d+", child.name)
        if match is not None and not Path(f"/proc/{match.group(1)}").exists():
            found.append(child.name)
    return found


@pytest.mark.slow
@pytest.mark.root
def test_a_configuration_that_overshoots_is_stopped_by_the_kernel_in_its_trial_alone(
    tmp_path: Path,
) -> None:
    parent = own_memory_cgroup_v1()
    (tmp_path / "greedy.py").write_text(GREEDY, encoding="utf-8")
    budget = BUDGET
    result = run_python(
        ["-m", "loaderdoctor", "tune", f"{tmp_path / 'greedy.py'}:Greedy", "--batch-size", "8",
         "--max-workers", "4", "--window", "0.3", "--mem-budget", str(budget), "--json"],
        timeout=120,
    )  # fmt: skip
    # tune itself, outside the trials' cgroups, survived the kill and reported
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["memory_limit"].startswith("cgroup v1, children of ")
    assert data["conservative"] is None
    trials = {
        (t["config"]["num_workers"], t["config"]["prefetch_factor"]): t for t in data["trials"]
    }
    four = trials[(4, 2)]
    assert four["status"] == "does-not-fit"
    assert data["stop_reason"] == "4 workers do not fit: the kernel stopped them at the budget"
    assert four["note"].startswith(
        "does not fit: the kernel stopped a worker in the trial's memory cgroup (cgroup limit "
    )
    assert re.search(r": [1-9]\d* OOM kill\(s\)", four["note"]), four["note"]
    if os.access("/dev/kmsg", os.R_OK):
        assert "; kernel: " in four["note"] and "Killed process" in four["note"]
    # nothing ended over the budget: the kernel's own count of each trial's workers, against
    # the limit that leaves the budget's room for the main process as it was then
    for trial in data["trials"]:
        if trial["config"]["num_workers"] == 0:
            assert trial["cgroup_limit_bytes"] is None
            continue
        assert trial["cgroup_peak_bytes"] <= trial["cgroup_limit_bytes"] <= budget, trial
        assert trial["cgroup_limit_bytes"] + trial["main_start_bytes"] <= budget + 16 * MiB
    pick = data["recommended"]
    assert (
        pick["num_workers"] < 4
        and trials[(pick["num_workers"], pick["prefetch_factor"])]["status"] == "ok"
    )
    assert leftovers(parent) == []


class Waiting:
    """5 ms of waiting per sample: a trial that would run its whole window."""

    def __len__(self) -> int:
        return 400

    def __getitem__(self, index: int) -> Any:
        import torch

        time.sleep(0.005)
        return torch.full((16,), float(index))


@pytest.mark.slow
@pytest.mark.root
def test_an_interrupted_trial_leaves_no_cgroup_and_no_worker() -> None:
    from loaderdoctor.system.child_cgroup import CgroupParent
    from loaderdoctor.tune import LoaderConfig, MeasureSettings, measure
    from loaderdoctor.tune.sampler import own_memory

    parent = own_memory_cgroup_v1()
    ours = f"loaderdoctor-limit-{os.getpid()}-*"
    # Only the trial's own processes: an earlier test's spawn start leaves multiprocessing's
    # resource tracker running as a child of this process for its whole life.
    before = {child.pid for child in psutil.Process().children()}

    def interrupt(_signal: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.5)  # mid-window: the workers are in the cgroup
    try:
        with pytest.raises(KeyboardInterrupt):
            measure(
                Waiting(),
                LoaderConfig.make(2),
                MeasureSettings(8, window_s=30.0, max_window_s=30.0),
                budget_bytes=own_memory() + 1024 * MiB,
                cgroup=CgroupParent(1, str(parent)),
            )
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert list(parent.glob(ours)) == []
    assert [c.cmdline() for c in psutil.Process().children() if c.pid not in before] == []
