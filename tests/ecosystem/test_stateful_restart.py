"""A ``StatefulDataLoader`` pool that loses a worker before its first batch starts over, under
heal: the pool built to go on from a stopped one (torchdata's state and the stopped pool's
sampler tail), and a persistent pool's reset for a new epoch (which waits for every worker's
resume reply). Each delivers every healthy sample exactly once; before, both raised. Pools that
die each time they start over stop at ``max_deaths_in_a_row``, with the error that names it."""

from __future__ import annotations

import os
import signal
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytest.importorskip("torchdata", reason="the eco extra installs torchdata")

import loaderdoctor
from ld_datasets import quiet_result_queue
from loaderdoctor.supervise.heal import HealWarning

pytestmark = [pytest.mark.slow, pytest.mark.ecosystem]
SAMPLES, BATCH = 64, 4


def _first_to_make(flag: Path) -> bool:
    """Make ``flag``; False where it was there. Atomic: a new pool's workers run the same
    worker_init_fn at once, and an exists-then-touch lets both of them through."""
    try:
        os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _kill_once(flag: Path) -> None:
    """SIGKILL this worker, the first time ``flag`` is not there yet."""
    if _first_to_make(flag):
        quiet_result_queue()
        os.kill(os.getpid(), signal.SIGKILL)


class KilledAt(torch.utils.data.Dataset[int]):
    def __init__(self, flags: Path, culprit: int) -> None:
        self.flags, self.culprit = flags, culprit

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> int:
        if index == self.culprit:
            _kill_once(self.flags / "sample")
        return index


class KilledWhileStarting:
    """A worker_init_fn that kills its worker once, in the pool that goes on after the sample's
    death: the first pool's workers started before it, and the worker that re-tries the
    sample alone first is let be."""

    def __init__(self, flags: Path) -> None:
        self.flags = flags

    def __call__(self, worker_id: int) -> None:
        if not (self.flags / "sample").exists():
            return
        if _first_to_make(self.flags / "re-try"):
            return
        _kill_once(self.flags / "init")


def test_a_death_while_the_pool_that_goes_on_starts_starts_it_over(tmp_path: Path) -> None:
    loader = loaderdoctor.StatefulDataLoader(
        KilledAt(tmp_path, culprit=37),
        batch_size=BATCH,
        shuffle=True,
        num_workers=2,
        worker_init_fn=KilledWhileStarting(tmp_path),
        heal=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        received = [i for batch in loader for i in batch.tolist()]
    assert (tmp_path / "init").exists()  # the second death happened
    assert Counter(received) == Counter(range(SAMPLES))
    assert [i.action for i in loader.incidents] == ["respawned", "respawned"]
    assert "a new pool starts over" in loader.incidents[1].diagnosis.evidence[-1]
    assert loader.report.status == "healed"


class Streams(torch.utils.data.IterableDataset[int]):
    """Worker w yields w, w + 2, ...; worker 0 is killed once while it starts epoch 1's stream
    (torch's worker makes the new iterator before it answers the reset's resume)."""

    def __init__(self, flags: Path) -> None:
        self.flags = flags

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        assert info is not None
        epoch = self.flags / f"epoch-of-{info.id}"
        starts = int(epoch.read_text()) + 1 if epoch.exists() else 0
        epoch.write_text(str(starts))
        if info.id == 0 and starts == 1:
            _kill_once(self.flags / "reset")
        return iter(range(info.id, SAMPLES, info.num_workers))


def test_a_death_while_a_persistent_pool_resets_for_a_new_epoch_starts_it_over(
    tmp_path: Path,
) -> None:
    loader = loaderdoctor.StatefulDataLoader(
        Streams(tmp_path), batch_size=BATCH, num_workers=2, persistent_workers=True, heal=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        epochs = [[i for batch in loader for i in batch.tolist()] for _ in range(3)]
    assert (tmp_path / "reset").exists()
    assert [Counter(epoch) for epoch in epochs] == [Counter(range(SAMPLES))] * 3
    assert [i.action for i in loader.incidents] == ["respawned"]
    assert loader.report.status == "healed"


class StreamsDyingOnReset(Streams):
    """Worker 0 is killed each time it starts a stream after the first epoch's."""

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        assert info is not None
        started = self.flags / f"started-{info.id}"
        if info.id == 0 and started.exists():
            quiet_result_queue()
            os.kill(os.getpid(), signal.SIGKILL)
        started.touch()
        return iter(range(info.id, SAMPLES, info.num_workers))


def test_pools_that_die_as_they_start_over_stop_at_the_deaths_limit(tmp_path: Path) -> None:
    loader = loaderdoctor.StatefulDataLoader(
        StreamsDyingOnReset(tmp_path),
        batch_size=BATCH,
        num_workers=2,
        persistent_workers=True,
        heal=True,
        max_deaths_in_a_row=2,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        assert len([i for batch in loader for i in batch.tolist()]) == SAMPLES
        with pytest.raises(loaderdoctor.HealingStoppedError) as stopped:
            list(loader)
    assert str(stopped.value).startswith(
        "loaderdoctor healing stopped: 3 worker deaths in a row with no batch delivered between "
        "them and no sample to blame (max_deaths_in_a_row=2"
    )
    assert [i.action for i in loader.incidents] == ["respawned", "respawned", "raised"]
