"""A healed ``StatefulDataLoader`` delivers every healthy sample exactly once on every sampler
shape: torchdata's own stateful sampler (``shuffle=True``), and torch's samplers, which torchdata
resumes by fast-forwarding a new pass (for a random one, another order): a resumed pool draws on
from the stopped one's pass instead. Checked against a ledger of what the loop received, with and
without a ``state_dict()`` taken mid-epoch, for a worker SIGKILLed once and a real segfault."""

from __future__ import annotations

import ctypes
import os
import signal
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, RandomSampler

pytest.importorskip("torchdata", reason="the eco extra installs torchdata")
from torchdata.stateful_dataloader import StatefulDataLoader as StockStatefulDataLoader

import loaderdoctor
from ld_datasets import quiet_result_queue
from loaderdoctor.supervise import heal_policy
from loaderdoctor.supervise.heal import HealWarning

pytestmark = [pytest.mark.slow, pytest.mark.ecosystem]
SAMPLES, BATCH = 96, 8


class Faulty(torch.utils.data.Dataset[int]):
    """Sample ``kill`` (or each of ``kills``) SIGKILLs its worker once; sample ``segv`` segfaults
    it every time."""

    def __init__(
        self,
        flags: Path,
        kill: int | None = None,
        segv: int | None = None,
        kills: tuple[int, ...] = (),
    ) -> None:
        self.flags, self.segv = flags, segv
        self.kills = (*kills, *([] if kill is None else [kill]))

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> int:
        flag = self.flags / f"killed-{index}"
        if index in self.kills and not flag.exists():
            flag.touch()
            quiet_result_queue()
            os.kill(os.getpid(), signal.SIGKILL)
        if index == self.segv:
            quiet_result_queue()
            ctypes.string_at(0)  # a real SIGSEGV
        return index


def sampling(shape: str, dataset: Any) -> dict[str, Any]:
    if shape == "batch_sampler":
        return {"batch_sampler": BatchSampler(RandomSampler(dataset), BATCH, drop_last=False)}
    if shape == "sampler":
        return {"sampler": RandomSampler(dataset), "batch_size": BATCH}
    return {"shuffle": True, "batch_size": BATCH}


@pytest.mark.parametrize(
    ("shape", "fault", "checkpoint"),
    [
        ("batch_sampler", "kill", False),
        ("batch_sampler", "segv", True),
        ("sampler", "kill", True),
        ("sampler", "segv", False),
        ("shuffle", "kill", True),
        ("shuffle", "segv", False),
    ],
)
def test_every_healthy_sample_arrives_once(
    shape: str, fault: str, checkpoint: bool, tmp_path: Path
) -> None:
    culprit = 37
    dataset = Faulty(tmp_path, **{fault: culprit})
    loader = loaderdoctor.StatefulDataLoader(
        dataset, num_workers=2, heal=True, **sampling(shape, dataset)
    )
    received: list[int] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        for step, batch in enumerate(loader):
            received += batch.tolist()
            if checkpoint and step == 3:
                loader.state_dict()
    healthy = set(range(SAMPLES)) - ({culprit} if fault == "segv" else set())
    assert Counter(received) == Counter(healthy)
    report = loader.report
    assert report.status == "healed"
    assert report.counts["samples"] == len(healthy)
    assert [i.diagnosis.indices for i in loader.incidents] == [[culprit]]
    assert report.quarantine == ([culprit] if fault == "segv" else [])


def test_a_second_death_while_the_pool_stops_gets_its_own_incident(tmp_path: Path) -> None:
    """Two workers killed at once: the pool stopped to resume from torchdata's state for the
    first one's death finds the second dead too, and tells it (its batch is re-sent with the
    rest, where the sample loads fine: a death seen nowhere else)."""
    first, second = 1, BATCH + 1  # in the first batch of each of the two workers
    loader = loaderdoctor.StatefulDataLoader(
        Faulty(tmp_path, kills=(first, second)), batch_size=BATCH, num_workers=2, heal=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        received = [i for batch in loader for i in batch.tolist()]
    assert Counter(received) == Counter(range(SAMPLES))
    handled, beside = loader.incidents  # the first as the policy decides about a SIGKILL
    assert (handled.diagnosis.cause, beside.diagnosis.cause) == ("killed-by-signal",) * 2
    assert beside.action == "respawned"
    assert sorted([*handled.diagnosis.indices, *beside.diagnosis.indices]) == [first, second]
    assert loader.report.status == "healed"


def test_a_state_dict_after_a_heal_still_loads_into_stock_torchdata(tmp_path: Path) -> None:
    """After a heal on torch's own sampler, the state keeps torchdata's format and counts: a
    stock loader loads it and delivers the rest of an epoch (a new pass, as stock's own resume
    of such a sampler does) without error."""

    def batches() -> BatchSampler:
        seeded = RandomSampler(range(SAMPLES), generator=torch.Generator().manual_seed(0))
        return BatchSampler(seeded, BATCH, drop_last=False)

    dataset = Faulty(tmp_path, kill=list(batches())[2][3])  # killed before the state is taken
    loader = loaderdoctor.StatefulDataLoader(
        dataset, batch_sampler=batches(), num_workers=2, heal=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        iterator = iter(loader)
        before = [i for _ in range(6) for i in next(iterator).tolist()]
        state = loader.state_dict()
    assert list(tmp_path.glob("killed-*")) and len(set(before)) == 6 * BATCH
    stock = StockStatefulDataLoader(
        Faulty(tmp_path),
        batch_sampler=batches(),
        num_workers=2,
    )
    stock.load_state_dict(state)
    rest = [i for batch in stock for i in batch.tolist()]
    assert len(rest) == SAMPLES - 6 * BATCH


def test_in_order_false_is_supervised_and_a_death_is_raised_not_resumed(tmp_path: Path) -> None:
    """``in_order=False``: torchdata's state cannot resume a new pool exactly (its own warning
    says it gives no guarantees), so a death under heal is raised with its verdict and the
    reason, never healed into lost or doubled samples; a clean pass is stock's."""
    stock = StockStatefulDataLoader(
        Faulty(tmp_path), batch_size=BATCH, num_workers=2, in_order=False
    )
    clean = loaderdoctor.StatefulDataLoader(
        Faulty(tmp_path), batch_size=BATCH, num_workers=2, in_order=False, heal=True
    )
    assert sorted(i for b in clean for i in b.tolist()) == sorted(
        i for b in stock for i in b.tolist()
    )
    assert type(clean._iterator).__name__ == "SupervisedStatefulIter"
    loader = loaderdoctor.StatefulDataLoader(
        Faulty(tmp_path, segv=37), batch_size=BATCH, num_workers=2, in_order=False, heal=True
    )
    with pytest.raises(loaderdoctor.WorkerDiedError) as raised:
        for _ in loader:
            pass
    diagnosis = raised.value.diagnosis
    assert (diagnosis.cause, diagnosis.indices) == ("native-crash", [37])
    assert diagnosis.evidence[-1] == heal_policy.NOT_EXACT_NOTE
    assert [i.action for i in loader.incidents] == ["raised"]
