"""torchdata's ``StatefulDataLoader``, supervised: its ``state_dict`` and
``load_state_dict`` resume exactly as stock torchdata's do, healed or not, and a loader built
directly from ``loaderdoctor.StatefulDataLoader`` is the same drop-in as ``loaderdoctor.DataLoader``.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("torchdata", reason="the eco extra installs torchdata")
from torchdata.stateful_dataloader import StatefulDataLoader as StockStatefulDataLoader

import loaderdoctor
from ld_datasets import quiet_result_queue
from loaderdoctor.supervise.heal import HealWarning
from loaderdoctor.supervise.stateful import SupervisedStatefulIter

pytestmark = [pytest.mark.slow, pytest.mark.ecosystem]
SAMPLES, BATCH, STOP_AFTER = 96, 8, 5


class Numbers(torch.utils.data.Dataset[int]):
    """Sample ``kill`` SIGKILLs its worker once (a flag file says it did)."""

    def __init__(self, kill: int | None = None, flags: str = "") -> None:
        self.kill, self.flags = kill, flags
        self.files = [f"/data/{i:04d}.bin" for i in range(SAMPLES)]

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> int:
        if index == self.kill:
            flag = Path(self.flags) / "killed"
            if not flag.exists():
                flag.touch()
                quiet_result_queue()  # the batches written before it are all sent
                os.kill(os.getpid(), signal.SIGKILL)
        return index


class CountingNumbers(Numbers):
    """A dataset with its own state (torchdata's ``Stateful``): how many samples it loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded = 0

    def __getitem__(self, index: int) -> int:
        self.loaded += 1
        return index

    def state_dict(self) -> dict[str, int]:
        return {"loaded": self.loaded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.loaded = state["loaded"]


def shuffled(cls: Any, dataset: Any, **kwargs: Any) -> Any:
    return cls(
        dataset,
        batch_size=BATCH,
        shuffle=True,
        num_workers=2,
        generator=torch.Generator().manual_seed(7),
        **kwargs,
    )


def stop_and_resume(first: Any, second: Any) -> tuple[list[int], list[int], Any]:
    """``STOP_AFTER`` batches from ``first``, its state_dict, then the rest from ``second``."""
    before: list[int] = []
    for step, batch in enumerate(first):
        before += batch.tolist()
        if step + 1 == STOP_AFTER:
            break
    state = first.state_dict()
    second.load_state_dict(state)
    after = [i for batch in second for i in batch.tolist()]
    return before, after, state


def plain(value: Any) -> Any:
    """A state_dict with its tensors as lists, so that two can be compared with ==."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value


@pytest.mark.parametrize("dataset", [Numbers, CountingNumbers])
def test_state_dict_resumes_exactly_as_stock_torchdata(dataset: Any) -> None:
    stock = stop_and_resume(
        shuffled(StockStatefulDataLoader, dataset()), shuffled(StockStatefulDataLoader, dataset())
    )
    first = shuffled(loaderdoctor.StatefulDataLoader, dataset())
    ours = stop_and_resume(first, shuffled(loaderdoctor.StatefulDataLoader, dataset()))
    assert isinstance(first._iterator, SupervisedStatefulIter)  # supervised, not stock
    assert (ours[0], ours[1]) == (stock[0], stock[1])
    assert sorted(ours[0] + ours[1]) == list(range(SAMPLES))
    assert plain(ours[2]) == plain(stock[2])  # torchdata's format, the same values
    # either one's state resumes the other
    crossed = shuffled(StockStatefulDataLoader, dataset())
    crossed.load_state_dict(ours[2])
    assert [i for batch in crossed for i in batch.tolist()] == stock[1]
    assert first.report.counts["batches"] == STOP_AFTER


def test_a_healed_loader_state_dict_resumes_the_rest_exactly_once(tmp_path: Path) -> None:
    """A worker SIGKILLed at sample 17 (in the first 5 batches of this order): healed from
    torchdata's own state, and the state_dict taken after it resumes the rest of the epoch."""
    order = [i for batch in shuffled(StockStatefulDataLoader, Numbers()) for i in batch.tolist()]
    kill = order[2 * BATCH + 3]
    first = shuffled(
        loaderdoctor.StatefulDataLoader, Numbers(kill=kill, flags=str(tmp_path)), heal=True
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before, after, _ = stop_and_resume(first, shuffled(StockStatefulDataLoader, Numbers()))
    assert (tmp_path / "killed").exists()
    assert before + after == order  # nothing lost, nothing twice, torchdata's order
    [incident] = first.incidents
    assert (incident.diagnosis.cause, incident.diagnosis.indices) == ("killed-by-signal", [kill])
    assert incident.diagnosis.sample_file == f"/data/{kill:04d}.bin"
    assert [str(w.message).split(" -> ")[0] for w in caught if w.category is HealWarning] == [
        f"loaderdoctor healed: {incident.diagnosis.title} [killed-by-signal]"
    ]
    # at the loop's line (in stop_and_resume), past torchdata's own frames
    assert {w.filename for w in caught if w.category is HealWarning} == {__file__}


def test_a_dropped_supervised_stateful_loader_is_freed_without_the_cyclic_gc() -> None:
    """No reference cycle in the loader/iterator graph: with the cyclic collector off, dropping
    the loader stops its workers, and nothing of the loader is left for the collector."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        loader = shuffled(loaderdoctor.StatefulDataLoader, Numbers())
        iterator = iter(loader)
        next(iterator)
        loader.state_dict()
        workers = list(iterator._workers)
        del loader, iterator
        for worker in workers:
            worker.join(timeout=60)
        assert [worker.is_alive() for worker in workers] == [False, False]
        gc.collect()
        left = {type(o).__name__ for o in gc.garbage if type(o).__module__.startswith(OURS)}
        assert left == set()
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()


OURS = ("loaderdoctor", "torchdata", "torch.utils.data")


class Crashing(Numbers):
    """Sample 20 SIGKILLs its worker once, sample 45 segfaults every time."""

    def __getitem__(self, index: int) -> int:
        if index == 45:
            quiet_result_queue()
            ctypes.string_at(0)  # a real SIGSEGV
        return super().__getitem__(index)


def test_persistent_workers_heal_once_and_serve_every_later_epoch(tmp_path: Path) -> None:
    loader = loaderdoctor.StatefulDataLoader(
        Crashing(kill=20, flags=str(tmp_path)),
        batch_size=BATCH,
        num_workers=2,
        persistent_workers=True,
        heal=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        epochs = [[i for batch in loader for i in batch.tolist()] for _ in range(3)]
    healthy = [i for i in range(SAMPLES) if i != 45]
    assert epochs == [healthy, healthy, healthy]
    assert [(i.diagnosis.cause, i.diagnosis.indices) for i in loader.incidents] == [
        ("killed-by-signal", [20]),
        ("native-crash", [45]),
    ]
    assert loader.report.quarantine == [45]


# torchdata's private hooks the supervised iterator overrides, with their parameters
STATEFUL_HOOKS = {
    "__init__": ["self", "loader", "next_iter_state"],
    "_next_index": ["self"],
    "_try_put_index": ["self"],
    "_reset": ["self", "loader", "first_iter", "prime_prefetch"],
    "_try_get_data": ["self", "timeout"],
    "_get_data": ["self"],
    "_process_data": ["self", "data", "worker_id", "state_dict"],
    "_next_data": ["self"],
    "_mark_worker_as_unavailable": ["self", "worker_id", "shutdown"],
    "_restore_main_state": ["self", "state_dict"],
    "state_dict": ["self"],
    "_shutdown_workers": ["self"],
}


def test_the_torchdata_internals_the_supervision_overrides_are_there() -> None:
    """The contract with torchdata's private iterator: the hooks overridden, with their
    parameters (a torchdata release that renames one fails here, not in a user's run)."""
    import inspect

    from torchdata.stateful_dataloader.stateful_dataloader import (
        _StatefulMultiProcessingDataLoaderIter as Iter,
    )

    found = {
        name: list(inspect.signature(getattr(Iter, name)).parameters) for name in STATEFUL_HOOKS
    }
    assert found == STATEFUL_HOOKS


def test_torchdata_calls_each_override_directly_with_its_own_parameters() -> None:
    """Every torchdata hook the supervised iterator (and loader) overrides is its ``ld_``
    method itself under torchdata's name, with torchdata's parameters."""
    import inspect

    from loaderdoctor import torchdata_compat
    from loaderdoctor.supervise.stateful import SupervisedStateful

    def shape(function: Any) -> list[tuple[str, Any]]:
        return [(p.name, p.default) for p in inspect.signature(function).parameters.values()]

    pairs = [
        (SupervisedStatefulIter, torchdata_compat.StatefulMultiProcessingIter),
        (SupervisedStateful, StockStatefulDataLoader),
    ]
    for ours, theirs in pairs:
        for torch_name, ld_name in ours._ld_aliases.items():
            assert vars(ours)[torch_name] is getattr(ours, ld_name), (ours.__name__, torch_name)
            assert shape(getattr(ours, ld_name)) == shape(getattr(theirs, torch_name)), ld_name
    overridden = set(SupervisedStatefulIter._ld_aliases)
    assert overridden == set(STATEFUL_HOOKS) - {"__init__", "state_dict"}
    assert loaderdoctor.StatefulDataLoader._get_iterator is SupervisedStateful.ld_get_iterator


def test_torchdata_keeps_torchs_books_under_torchs_names() -> None:
    """What ``torch_compat.IteratorBooks`` reads of torchdata's iterator,
    right after iter() (2 workers, prefetch 2): torch's names, torch's shapes."""
    from loaderdoctor import torch_compat

    loader = StockStatefulDataLoader(list(range(16)), batch_size=2, num_workers=2)
    iterator = iter(loader)
    try:
        assert iterator._send_idx == 4 and iterator._rcvd_idx == 0 and iterator._timeout == 0
        assert iterator._task_info == {0: (0,), 1: (1,), 2: (0,), 3: (1,)}
        assert iterator._workers_status == [True, True]
        assert iterator._workers_num_tasks == [2, 2]
        assert iterator._tasks_outstanding == 4
        assert iterator._data_queue is iterator._worker_result_queue
        assert len(iterator._workers) == len(iterator._index_queues) == 2
        assert callable(iterator._workers_done_event.set)
        assert (iterator._shutdown, iterator._finished) == (False, False)
        books = torch_compat.IteratorBooks(iterator)
        assert (books.num_workers, books.prefetch_factor) == (2, 2)
        assert books.owed_by(1) == [1, 3]
        assert torch_compat.is_iterable(loader) is False
        assert loader._iterator is iterator  # torchdata keeps it (its state_dict reads it)
    finally:
        iterator._shutdown_workers()


def test_a_worker_death_raises_its_verdict_from_the_drop_in() -> None:
    """Without heal, a segfault at sample 45 raises torch's kind of error with the verdict."""
    loader = loaderdoctor.StatefulDataLoader(Crashing(), batch_size=BATCH, num_workers=2)
    received: list[int] = []
    with pytest.raises(loaderdoctor.WorkerDiedError) as raised:
        for batch in loader:
            received += batch.tolist()
    diagnosis = raised.value.diagnosis
    assert (diagnosis.cause, diagnosis.indices, diagnosis.sample_file) == (
        "native-crash",
        [45],
        "/data/0045.bin",
    )
    assert isinstance(raised.value, RuntimeError)
    # in order, whole batches, never the culprit's (how many came before the death was seen
    # depends on the load: a batch written just before it may still be in the pipe)
    assert received == list(range(len(received))) and len(received) in range(0, 41, BATCH)
    assert [i.action for i in loader.incidents] == ["raised"]
