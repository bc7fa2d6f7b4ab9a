"""A ``StatefulDataLoader`` over an IterableDataset is supervised as torch's DataLoader over one
is: a worker death names the item by its position in that worker's stream; healed, the pool
resumes from torchdata's own state (a Stateful dataset's, or torchdata's fast-forward of any
other), the item in flight is re-tried once and every other item arrives exactly once; an item
that kills its worker every time ends that worker's stream just before it, said as a loss.
Checked against a ledger of what the loop received, with and without a ``state_dict()`` taken
mid-epoch, for a worker SIGKILLed once and a real segfault every time."""

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

pytest.importorskip("torchdata", reason="the eco extra installs torchdata")
from torchdata.stateful_dataloader import StatefulDataLoader as StockStatefulDataLoader

import loaderdoctor
from ld_datasets import quiet_result_queue
from loaderdoctor.supervise import heal_policy
from loaderdoctor.supervise.heal import HealWarning

pytestmark = [pytest.mark.slow, pytest.mark.ecosystem]
ITEMS, WORKERS, BATCH = 40, 2, 2
BAD = 21  # worker 1's stream: 1, 3, ... 21 is its item #10


def fault(item: int, flags: Path, mode: str) -> None:
    """``kill``: SIGKILL the worker once (a flag file says it did); ``segv``: segfault it every
    time the item is read."""
    if item != BAD or (mode == "kill" and (flags / "killed").exists()):
        return
    (flags / "killed").touch()
    quiet_result_queue()  # the batches written before it are all sent
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    ctypes.string_at(0)  # a real SIGSEGV


class Stream(torch.utils.data.IterableDataset[int]):
    """Each worker its share of 0..ITEMS-1; not Stateful: torchdata resumes it by re-reading
    every stream from its start and dropping the batches yielded already."""

    def __init__(self, flags: Path, mode: str) -> None:
        self.flags, self.mode = flags, mode

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        for item in range(info.id, ITEMS, info.num_workers):
            fault(item, self.flags, self.mode)
            yield item


class StatefulStream(Stream):
    """The same stream with its own state: torchdata resumes it from the position it saved."""

    def __init__(self, flags: Path, mode: str) -> None:
        super().__init__(flags, mode)
        self.position = 0

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        mine = list(range(info.id, ITEMS, info.num_workers))
        while self.position < len(mine):
            item = mine[self.position]
            self.position += 1
            fault(item, self.flags, self.mode)
            yield item


def stream_loader(dataset: Any, **kwargs: Any) -> Any:
    return loaderdoctor.StatefulDataLoader(dataset, batch_size=BATCH, num_workers=WORKERS, **kwargs)


@pytest.mark.parametrize("stateful", [False, True], ids=["fast-forwarded", "stateful"])
@pytest.mark.parametrize("checkpoint", [False, True], ids=["", "state_dict"])
@pytest.mark.parametrize("mode", ["kill", "segv"])
def test_a_healed_stream_delivers_every_item_once(
    stateful: bool, checkpoint: bool, mode: str, tmp_path: Path
) -> None:
    loader = stream_loader((StatefulStream if stateful else Stream)(tmp_path, mode), heal=True)
    received: list[int] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", HealWarning)
        for step, batch in enumerate(loader):
            received += batch.tolist()
            if checkpoint and step == 3:
                loader.state_dict()
    heal = [str(w.message) for w in caught if issubclass(w.category, HealWarning)]
    named = "item #10 of worker 1's stream"
    report = loader.report
    if mode == "kill":  # re-tried once, it loads: nothing is lost
        assert Counter(received) == Counter(range(ITEMS))
        assert [(i.diagnosis.cause, i.action) for i in loader.incidents] == [
            ("killed-by-signal", "respawned")
        ]
        assert heal == [
            "loaderdoctor healed: Something outside the worker killed it [killed-by-signal] -> "
            f"respawned ({named}, re-tried once)"
        ]
        assert (report.status, report.counts["samples"]) == ("healed", ITEMS)
    else:  # worker 1's stream ends just before the item; every other item arrives once
        expected = [i for i in range(ITEMS) if i % WORKERS == 0 or i < BAD]
        assert Counter(received) == Counter(expected)
        assert [(i.diagnosis.cause, i.action) for i in loader.incidents] == [
            ("native-crash", "respawned"),
            ("native-crash", "lost"),
        ]
        lost = "worker 1's items from #10 on are lost"
        assert heal[-1] == (
            "loaderdoctor healed: The worker crashed in native code [native-crash] -> lost "
            f"({named}; {lost})"
        )
        assert (
            f"worker 1 died at its item #10 again: its stream cannot be read past it, so {lost}; "
            "its items before #10 arrive (the other workers resume)"
        ) in loader.incidents[1].diagnosis.evidence
        assert report.status == "healed-with-loss"
        assert (report.counts["samples"], report.counts["skipped"]) == (len(expected), 1)
    assert [(i.diagnosis.worker_id, i.diagnosis.position) for i in loader.incidents] == [
        (1, 10)
    ] * len(loader.incidents)


@pytest.mark.parametrize("stateful", [False, True], ids=["fast-forwarded", "stateful"])
def test_a_state_dict_after_a_heal_resumes_the_rest_in_stock_torchdata(
    stateful: bool, tmp_path: Path
) -> None:
    """Taken after a heal, the state keeps torchdata's format and counts (a fast-forward is
    counted once, where torchdata 0.11 itself counts it twice): stock torchdata resumes it with
    the rest of the epoch, each item once."""
    dataset = (StatefulStream if stateful else Stream)(tmp_path, "kill")
    loader = stream_loader(dataset, heal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        iterator = iter(loader)
        before = [i for _ in range(14) for i in next(iterator).tolist()]
        state = loader.state_dict()
    assert (tmp_path / "killed").exists() and [i.action for i in loader.incidents] == ["respawned"]
    stock = StockStatefulDataLoader(
        (StatefulStream if stateful else Stream)(tmp_path, "kill"),
        batch_size=BATCH,
        num_workers=WORKERS,
    )
    stock.load_state_dict(state)
    rest = [i for batch in stock for i in batch.tolist()]
    assert Counter(before + rest) == Counter(range(ITEMS))


def test_without_heal_the_verdict_names_the_stream_position(tmp_path: Path) -> None:
    loader = stream_loader(Stream(tmp_path, "segv"))
    with pytest.raises(loaderdoctor.WorkerDiedError) as raised:
        for _ in loader:
            pass
    diagnosis = raised.value.diagnosis
    assert (diagnosis.cause, diagnosis.worker_id, diagnosis.position) == ("native-crash", 1, 10)
    assert [line for line in diagnosis.evidence if line.startswith("in flight:")] == [
        f"in flight: item #10 of worker 1's stream, fetch stage, batch {diagnosis.batch}"
    ]
    assert [i.action for i in loader.incidents] == ["raised"]


def test_in_order_false_is_supervised_and_a_death_is_raised_with_the_reason(
    tmp_path: Path,
) -> None:
    """``in_order=False``: torchdata's state cannot resume a new pool exactly, so a death under
    heal is raised with its verdict (the stream position) and that reason, never healed."""
    loader = stream_loader(Stream(tmp_path, "kill"), heal=True, in_order=False)
    with pytest.raises(loaderdoctor.WorkerDiedError) as raised:
        for _ in loader:
            pass
    diagnosis = raised.value.diagnosis
    assert (diagnosis.cause, diagnosis.worker_id, diagnosis.position) == ("killed-by-signal", 1, 10)
    assert diagnosis.evidence[-1] == heal_policy.NOT_EXACT_NOTE
    assert [i.action for i in loader.incidents] == ["raised"]
