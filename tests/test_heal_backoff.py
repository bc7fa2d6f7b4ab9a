"""Back-off that climbs back and loaderdoctor's own failures.

Real worker deaths (a worker SIGKILLs itself once; the sample loads fine alone, so the machine is
blamed and the loader backs off) and a real bug in loaderdoctor's own wrapper code.
"""

from __future__ import annotations

import fnmatch
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch

import loaderdoctor
from ld_datasets import Ledger
from loaderdoctor.supervise import heal_policy
from loaderdoctor.supervise.heal import HealWarning
from loaderdoctor.supervise.worker import collate as worker_collate

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _kernel_log_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    """As where the kernel log cannot be read (not root, a container): a SIGKILL the loader
    cannot tell from an OOM kill, so the machine is blamed and the pool backs off. Where the
    kernel log and the cgroup counters show no OOM kill, an outside SIGKILL does not shrink the
    pool (``test_chaos``)."""
    from loaderdoctor.supervise.parent import recovery

    monkeypatch.setattr(recovery, "oom_ruled_out", lambda evidence: False)


def epochs(loader: loaderdoctor.DataLoader, count: int) -> tuple[list[list[int]], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        delivered = [[int(v) for batch in loader for v in batch.flatten()] for _ in range(count)]
    heal = [str(w.message) for w in caught if issubclass(w.category, HealWarning)]
    return delivered, heal


def steps(loader: loaderdoctor.DataLoader) -> list[tuple[str, int, int, int]]:
    return [(s.direction, s.num_workers, s.prefetch_factor, s.epoch) for s in loader.report.backoff]


def test_back_off_climbs_back_after_a_healthy_epoch(tmp_path: Path) -> None:
    loader = loaderdoctor.DataLoader(
        Ledger(24, {5: "kill-once"}, str(tmp_path)), batch_size=2, num_workers=2, heal=True
    )
    delivered, heal = epochs(loader, 4)
    for epoch in delivered:
        assert sorted(epoch) == list(range(24))
    # down in epoch 0; epoch 1 is healthy at prefetch 1; epoch 2 starts back at prefetch 2
    assert steps(loader) == [("down", 2, 1, 0), ("up", 2, 2, 2)]
    assert [(i.diagnosis.cause, i.action) for i in loader.incidents] == [
        ("killed-by-signal", "backed-off")
    ]
    assert heal[-1] == (
        "loaderdoctor: a whole epoch without an incident; back up to num_workers=2, "
        "prefetch_factor=2"
    )
    assert loader.report.to_dict()["backoff"][1] == {
        "direction": "up",
        "num_workers": 2,
        "prefetch_factor": 2,
        "epoch": 2,
        "reason": "a whole epoch without an incident",
    }


def test_back_off_climbs_back_within_an_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(heal_policy, "CLIMB_AFTER_BATCHES", 3)
    loader = loaderdoctor.DataLoader(
        Ledger(40, {3: "kill-once"}, str(tmp_path)), batch_size=2, num_workers=2, heal=True
    )
    (epoch,), heal = epochs(loader, 1)
    assert Counter(epoch) == Counter(range(40))  # every sample once, across both hand-overs
    assert steps(loader) == [("down", 2, 1, 0), ("up", 2, 2, 0)]
    assert heal[-1] == (
        "loaderdoctor: 3 batches without an environmental failure; back up to num_workers=2, "
        "prefetch_factor=2"
    )


def test_a_process_killing_cause_never_moves_samples_into_the_training_process(
    tmp_path: Path,
) -> None:
    # Ledger raises "would kill the main process" for a kill sample loaded in this process.
    faults = {3: "kill-once", 9: "kill-once", 15: "kill-once"}
    loader = loaderdoctor.DataLoader(
        Ledger(20, faults, str(tmp_path)), batch_size=2, num_workers=1, prefetch_factor=1, heal=True
    )
    (epoch,), _ = epochs(loader, 1)
    assert sorted(epoch) == list(range(20))
    assert [(i.diagnosis.cause, i.action) for i in loader.incidents] == [
        ("killed-by-signal", "respawned")
    ] * 3
    note, respawned = loader.incidents[0].diagnosis.evidence[-2:]
    assert note == (
        "sample 3 loaded fine alone: the machine, not the sample; at the lowest safe setting "
        "already (allow_in_process=True to go lower)"
    )
    # at the floor, the one worker is replaced alone
    assert fnmatch.fnmatchcase(
        respawned, "worker 0 respawned alone (pid * -> pid *); 1 owed batch re-sent"
    )
    assert steps(loader) == []


def test_in_process_loading_after_a_kill_only_when_allowed(tmp_path: Path) -> None:
    loader = loaderdoctor.DataLoader(
        Ledger(20, {3: "kill-once"}, str(tmp_path)),
        batch_size=2,
        num_workers=1,
        prefetch_factor=1,
        heal=True,
        allow_in_process=True,
    )
    (epoch,), _ = epochs(loader, 1)
    assert sorted(epoch) == list(range(20))
    assert steps(loader) == [("down", 0, 1, 0)]


# --- loaderdoctor's own failures -----------------------------------------------------------


@pytest.fixture
def broken_collate_wrapper(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real bug in loaderdoctor's collate wrapper: a helper it calls for every batch is gone
    (forked workers inherit the patch)."""
    monkeypatch.setattr(worker_collate, "_with_stream_positions", None)


@pytest.mark.parametrize("heal", [True, False], ids=["heal", "no-heal"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_our_own_bug_falls_back_to_plain_torch_with_one_warning_healing_or_not(
    broken_collate_wrapper: None, num_workers: int, heal: bool
) -> None:
    """Never a verdict on the job, and never the end of a job that plain torch runs."""
    data = [torch.tensor([i]) for i in range(8)]
    loader = loaderdoctor.DataLoader(data, batch_size=2, num_workers=num_workers, heal=heal)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        delivered = [[b.tolist() for b in loader] for _ in range(2)]
    stock = [b.tolist() for b in torch.utils.data.DataLoader(data, batch_size=2)]
    assert delivered == [stock, stock]
    loud = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(loud) == 1
    assert loud[0].splitlines()[0] == (
        "loaderdoctor's own machinery failed (internal-error, please report it); this "
        "DataLoader continues as a plain torch DataLoader, without supervision."
    )
    report = loader.report
    assert report.status == "healed"
    assert [(i.diagnosis.cause, i.action) for i in report.incidents] == [
        ("internal-error", "fell-back")
    ]
    diagnosis = report.incidents[0].diagnosis
    assert diagnosis.evidence[0].startswith(
        "the exception was raised in loaderdoctor's own code: loaderdoctor/supervise/worker/collate.py:"
    )
    assert "traceback (please include it in the report):" in diagnosis.evidence
    assert diagnosis.fixes[0].startswith("Please report it to the loaderdoctor maintainers")


def test_a_users_exception_raised_at_our_call_site_is_still_the_users() -> None:
    # A list as the dataset fails inside loaderdoctor's wrapper frame (the C-level list lookup
    # has no Python frame of its own); the exception is tagged where the user's code was
    # called, so it is a sample error, not ours.
    sampler = [[0, 1], [2, 99]]
    loader = loaderdoctor.DataLoader(
        [torch.tensor([i]) for i in range(4)], batch_sampler=sampler, num_workers=1
    )
    with pytest.raises(IndexError) as caught:
        list(loader)
    assert caught.value.diagnosis.cause == "sample-error"  # type: ignore[attr-defined]


class TransientKills(torch.utils.data.Dataset):
    """Index 5's worker SIGKILLs itself at the 1st, 5th and 9th fetch of index 5 (a flaky node).

    Fetches are counted in a file (one byte appended per fetch), so every process sees one count.
    Each kill's culprit loads fine when re-tried alone: the machine is blamed every time.
    """

    KILL_AT_FETCH = (1, 5, 9)

    def __init__(self, counter: str) -> None:
        self.counter = counter

    def __len__(self) -> int:
        return 24

    def __getitem__(self, index: int) -> torch.Tensor:
        import os
        import signal

        if index == 5 and torch.utils.data.get_worker_info() is not None:
            with open(self.counter, "ab") as handle:
                handle.write(b".")
            if os.path.getsize(self.counter) in self.KILL_AT_FETCH:
                os.kill(os.getpid(), signal.SIGKILL)
        return torch.tensor([index])


def test_a_soak_with_transient_kills_steps_down_and_climbs_back_each_time(tmp_path: Path) -> None:
    counter = tmp_path / "fetches-of-5"
    loader = loaderdoctor.DataLoader(
        TransientKills(str(counter)), batch_size=2, num_workers=2, heal=True
    )
    delivered, _ = epochs(loader, 12)
    for epoch in delivered:
        assert sorted(epoch) == list(range(24))  # every sample exactly once, every epoch
    incidents = [(i.diagnosis.cause, i.action) for i in loader.incidents]
    assert incidents == [("killed-by-signal", "backed-off")] * 3
    directions = [step[0] for step in steps(loader)]
    assert directions == ["down", "up"] * 3  # never stuck down: it climbed back after each kill
    assert all(step[1] >= 1 for step in steps(loader))  # never into the training process
    assert steps(loader)[-1][1:3] == (2, 2)  # back to the user's num_workers and prefetch
