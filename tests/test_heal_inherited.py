"""What a worker inherits from the main process is a suspect before any sample is: a semaphore
whose slots killed workers leaked, an LMDB environment opened in ``Dataset.__init__``. Healing
stops with a verdict that names it, and no innocent sample is quarantined. Real semaphores, a
real LMDB database, real workers."""

from __future__ import annotations

import fnmatch
import multiprocessing
import os
import time
import warnings
from pathlib import Path

import pytest
import torch

import loaderdoctor

pytestmark = pytest.mark.slow


class Licensed(torch.utils.data.Dataset):
    """Each worker takes a slot of a 3-slot semaphore at its first sample and keeps it (a
    per-worker licence): the fourth worker waits for ever."""

    def __init__(self, start_method: str) -> None:
        # (a semaphore travels only to workers of the start method it was made for)
        self.slots = multiprocessing.get_context(start_method).BoundedSemaphore(3)
        self.held = False

    def __len__(self) -> int:
        return 32

    def __getitem__(self, index: int) -> int:
        if torch.utils.data.get_worker_info() is not None and not self.held:
            self.slots.acquire()
            self.held = True
        return index


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_semaphore_the_killed_workers_leaked_is_named_and_no_sample_blamed(
    start_method: str,
) -> None:
    loader = loaderdoctor.DataLoader(
        Licensed(start_method),
        batch_size=2,
        num_workers=4,
        heal=True,
        hang_timeout=2,
        multiprocessing_context=start_method,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(loaderdoctor.HealingStoppedError) as stopped:
            list(loader)
    diagnosis = stopped.value.diagnosis
    assert diagnosis.cause == "shared-failure"
    assert fnmatch.filter(
        diagnosis.evidence,
        "inherited from the main process: self.slots, a multiprocessing.BoundedSemaphore shared "
        "by every worker: 3 of its 3 slots are taken now. A worker killed while it holds a slot "
        "leaks it *",
    )
    assert loader.report.quarantine == []
    # one hang, its re-try and the control's: no loop of hang timeouts
    assert [(i.diagnosis.cause, i.action) for i in loader.incidents] == [
        ("shared-failure", "raised")
    ]


class LicensedLast(Licensed):
    """Worker 0 takes its slot only once the other three hold theirs: the first batch is the
    one that never comes, so no sample is delivered before the hang."""

    def __getitem__(self, index: int) -> int:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.id == 0 and not self.held:
            deadline = time.monotonic() + 60
            while self.slots.get_value() > 0 and time.monotonic() < deadline:
                time.sleep(0.01)
        return super().__getitem__(index)


def test_with_no_sample_delivered_yet_a_batch_loaded_ahead_of_its_turn_is_the_control() -> None:
    loader = loaderdoctor.DataLoader(
        LicensedLast("fork"), batch_size=2, num_workers=4, heal=True, hang_timeout=2
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(loaderdoctor.HealingStoppedError) as stopped:
            list(loader)
    diagnosis = stopped.value.diagnosis
    assert diagnosis.cause == "shared-failure"
    assert fnmatch.filter(diagnosis.evidence, "in flight: sample 0, *")
    assert fnmatch.filter(
        diagnosis.evidence,
        "healing stopped: sample 0 failed again alone in a fresh worker, and so did sample *, "
        "loaded whole earlier in this run, *",
    )
    assert loader.report.quarantine == []
    assert [(i.diagnosis.cause, i.action) for i in loader.incidents] == [
        ("shared-failure", "raised")
    ]


class FromLmdb(torch.utils.data.Dataset):
    """The common LMDB pattern that lint's LD106 flags: the environment opened in __init__."""

    def __init__(self, root: str, n: int) -> None:
        import lmdb

        self.n = n
        self.env = lmdb.open(root, map_size=1 << 24)
        with self.env.begin(write=True) as transaction:
            for index in range(n):
                transaction.put(str(index).encode(), os.urandom(16))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        with self.env.begin() as transaction:
            value = transaction.get(str(index).encode())
        return torch.frombuffer(bytearray(value), dtype=torch.uint8)


def test_an_lmdb_environment_opened_in_init_is_named_and_no_sample_blamed(tmp_path: Path) -> None:
    pytest.importorskip("lmdb", reason="the dev extra installs lmdb")
    loader = loaderdoctor.DataLoader(
        FromLmdb(str(tmp_path), 200), batch_size=8, num_workers=4, heal=True, hang_timeout=5
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(loaderdoctor.HealingStoppedError) as stopped:
            list(loader)
    diagnosis = stopped.value.diagnosis
    assert diagnosis.cause == "shared-failure"
    assert diagnosis.evidence[1] == (
        "likely cause: what the workers inherit from the main process, named below"
    )
    assert diagnosis.evidence[2].startswith(
        "inherited from the main process: self.env, a handle (lmdb.Environment) opened in the main "
        "process (Dataset.__init__) and used by every worker"
    )
    assert loader.report.quarantine == []
    # whether dataset[i] fails in the main process too is not known: the verdict does not claim it
    assert "fails the same way" not in str(stopped.value)


def test_without_heal_a_sample_blamed_beside_an_inherited_lmdb_environment_names_it(
    tmp_path: Path,
) -> None:
    # no control can clear the sample: the verdict names the environment beside it, and the
    # first fix is to rule the environment out
    pytest.importorskip("lmdb", reason="the dev extra installs lmdb")
    loader = loaderdoctor.DataLoader(FromLmdb(str(tmp_path), 200), batch_size=8, num_workers=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as raised:
            list(loader)
    diagnosis = raised.value.diagnosis  # type: ignore[attr-defined]
    assert diagnosis.cause == "sample-error"
    assert diagnosis.confidence <= 0.6
    [named] = [line for line in diagnosis.evidence if "self.env" in line]
    assert "a handle (lmdb.Environment) opened in the main process" in named
    assert diagnosis.fixes[0].startswith("Before blaming the sample")
