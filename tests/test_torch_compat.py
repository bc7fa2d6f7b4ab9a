"""Fails loudly when a torch release moves or reshapes a private that loaderdoctor relies on.

loaderdoctor subclasses torch's DataLoader iterators and reads their private state. This file is
the contract, stated against torch itself (no loaderdoctor code runs in most of these tests):

- every private name loaderdoctor imports exists (nothing here skips);
- every method loaderdoctor overrides still has the signature it overrides, and torch's own code
  still calls it at the moment loaderdoctor expects (a recording subclass runs a real loader);
- every attribute loaderdoctor reads from a live iterator or loader is set by torch, with the
  shape loaderdoctor assumes;
- the loader attributes loaderdoctor substitutes (through a view of the loader) are the ones
  torch's iterator reads;
- every private of torch that the source of ``loaderdoctor`` mentions is listed here, so a new
  reach into torch cannot slip in without a check.
"""

from __future__ import annotations

import ast
import dataclasses
import gc
import importlib
import inspect
import multiprocessing
import multiprocessing.process
import multiprocessing.queues
import re
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
import torch.utils.data.dataloader as dataloader_module
from torch.utils.data import DataLoader, Dataset

from loaderdoctor import torch_compat

SRC = Path(torch_compat.__file__).parent
MP_ITER = dataloader_module._MultiProcessingDataLoaderIter
SINGLE_ITER = dataloader_module._SingleProcessDataLoaderIter

# Module-level privates, by dotted path.
PRIVATE_NAMES = (
    "torch.utils.data.dataloader._MultiProcessingDataLoaderIter",
    "torch.utils.data.dataloader._SingleProcessDataLoaderIter",
    "torch.utils.data.dataloader._DatasetKind",
    "torch.utils.data._utils.MP_STATUS_CHECK_INTERVAL",
    "torch.utils.data._utils.worker._worker_info",
    "torch.utils.data._utils.worker.WorkerInfo",
    "torch.utils.data._utils.worker._ResumeIteration",
    "torch.utils.data._utils.worker._IterableDatasetStopIteration",
    "torch.utils.data._utils.signal_handling._remove_worker_pids",
    "torch._utils.ExceptionWrapper",
    "torch._utils.KeyErrorMessage",
)

# Methods loaderdoctor overrides or calls: (class, name) -> parameters (name, default) after self.
EMPTY = inspect.Parameter.empty
METHOD_SIGNATURES: dict[tuple[type, str], list[tuple[str, Any]]] = {
    (MP_ITER, "__init__"): [("loader", EMPTY)],
    (MP_ITER, "_next_index"): [],
    (MP_ITER, "_try_put_index"): [],
    (MP_ITER, "_reset"): [("loader", EMPTY), ("first_iter", False)],
    (MP_ITER, "_try_get_data"): [("timeout", torch_compat.MP_STATUS_CHECK_INTERVAL)],
    (MP_ITER, "_get_data"): [],
    (MP_ITER, "_next_data"): [],
    (MP_ITER, "_process_data"): [("data", EMPTY), ("worker_idx", EMPTY)],
    (MP_ITER, "_shutdown_workers"): [],
    (MP_ITER, "_mark_worker_as_unavailable"): [("worker_id", EMPTY), ("shutdown", False)],
    (SINGLE_ITER, "__init__"): [("loader", EMPTY)],
    (SINGLE_ITER, "_next_index"): [],
    (SINGLE_ITER, "_next_data"): [],
    (DataLoader, "_get_iterator"): [],
    (DataLoader, "check_worker_number_rationality"): [],
}

# Attributes of a live multiprocessing iterator (2 workers, prefetch 2, 8 batches), right after
# iter(): what loaderdoctor reads, with the value or shape it assumes.
FRESH_ITERATOR_STATE: dict[str, Any] = {
    "_num_workers": 2,
    "_prefetch_factor": 2,
    "_timeout": 0,
    "_send_idx": 4,
    "_rcvd_idx": 0,
    "_num_yielded": 0,
    "_shutdown": False,
    "_worker_pids_set": True,
    "_workers_status": [True, True],
    "_workers_num_tasks": [2, 2],
    # outstanding task -> (worker_id,); a received one becomes (worker_id, data)
    "_task_info": {0: (0,), 1: (1,), 2: (0,), 3: (1,)},
}


class Squares(Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> int:
        if index == 13:
            raise KeyError("thirteen")
        return index * index


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        value: Any = module
        for attribute in parts[split:]:
            value = getattr(value, attribute)  # AttributeError: torch moved it
        return value
    raise ImportError(dotted)


@pytest.mark.parametrize("dotted", PRIVATE_NAMES)
def test_private_name_exists(dotted: str) -> None:
    _resolve(dotted)


def test_torch_compat_lists_only_names_checked_here() -> None:
    assert set(torch_compat.PRIVATE_NAMES) <= set(PRIVATE_NAMES)
    checked = {name for _, name in METHOD_SIGNATURES} | set(FRESH_ITERATOR_STATE)
    checked |= set(OTHER_ITERATOR_ATTRIBUTES)
    assert set(torch_compat.ITERATOR_ATTRIBUTES) <= checked


def test_dataset_kinds() -> None:
    kind = dataloader_module._DatasetKind
    assert {kind.Map, kind.Iterable} == {0, 1}
    assert DataLoader([1])._dataset_kind == kind.Map
    assert DataLoader(_Stream())._dataset_kind == kind.Iterable


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self) -> Any:
        return iter(range(3))


@pytest.mark.parametrize(
    ("owner", "name"), sorted(METHOD_SIGNATURES, key=lambda k: (k[0].__name__, k[1]))
)
def test_method_signature(owner: type, name: str) -> None:
    method = getattr(owner, name, None)
    assert callable(method), f"torch removed {owner.__name__}.{name}"
    parameters = list(inspect.signature(method).parameters.values())
    assert parameters[0].name == "self"
    shape = [(p.name, p.default) for p in parameters[1:]]
    assert shape == METHOD_SIGNATURES[owner, name], f"{owner.__name__}.{name} changed shape"


def test_remove_worker_pids_is_callable_with_an_iterator_id() -> None:
    from torch.utils.data._utils import signal_handling

    assert callable(signal_handling._remove_worker_pids)
    assert callable(signal_handling._set_worker_pids)


def test_worker_info_is_a_dataclass_with_a_dataset_field() -> None:
    from torch.utils.data._utils.worker import WorkerInfo

    assert dataclasses.is_dataclass(WorkerInfo)
    assert {"id", "num_workers", "seed", "dataset"} <= {
        f.name for f in dataclasses.fields(WorkerInfo)
    }
    info = WorkerInfo(id=0, num_workers=1, seed=1, dataset=[1])
    assert dataclasses.replace(info, dataset=[2]).dataset == [2]


def test_exception_wrapper_shape() -> None:
    from torch._utils import ExceptionWrapper, KeyErrorMessage

    try:
        raise KeyError("k")
    except KeyError:
        wrapper = ExceptionWrapper(sys.exc_info(), where="in DataLoader worker process 0")
    assert wrapper.exc_type is KeyError
    assert wrapper.where == "in DataLoader worker process 0"
    assert "Traceback" in wrapper.exc_msg
    assert str(KeyErrorMessage("a\nb")) == "a\nb"  # KeyError's repr-quoting undone


# --- a real loader, torch's own iterator, observed through a recording subclass --------------
CALLS: list[tuple[Any, ...]] = []


class RecordingIter(MP_ITER):
    """torch's iterator, recording each call loaderdoctor's subclass hooks into."""

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        CALLS.append(("_reset", first_iter))
        super()._reset(loader, first_iter)

    def _next_index(self) -> Any:
        index = super()._next_index()
        CALLS.append(("_next_index", index))
        return index

    def _try_put_index(self) -> None:
        sent = self._send_idx
        super()._try_put_index()
        CALLS.append(("_try_put_index", self._send_idx - sent))

    def _try_get_data(self, timeout: float = torch_compat.MP_STATUS_CHECK_INTERVAL) -> Any:
        CALLS.append(("_try_get_data", timeout))
        return super()._try_get_data(timeout)

    def _get_data(self) -> Any:
        CALLS.append(("_get_data",))
        return super()._get_data()

    def _process_data(self, data: Any, worker_idx: int) -> Any:
        # torch pops the task handed over from _task_info before this call; the call takes one
        # task off the worker's count (_workers_num_tasks) and sends the next index (one put)
        popped = self._rcvd_idx - 1 not in self._task_info
        tasks_before, sent_before, calls_before = (
            sum(self._workers_num_tasks),
            self._send_idx,
            len(CALLS),
        )
        try:
            return super()._process_data(data, worker_idx)
        finally:
            puts = _names(CALLS[calls_before:]).count("_try_put_index")
            sent = self._send_idx - sent_before
            balance = sum(self._workers_num_tasks) - tasks_before - sent
            CALLS.append(("_process_data", type(data).__name__, worker_idx, popped, puts, balance))

    def _shutdown_workers(self) -> None:
        CALLS.append(("_shutdown_workers", self._shutdown))
        super()._shutdown_workers()


class RecordingLoader(DataLoader):
    def _get_iterator(self) -> Any:
        CALLS.append(("_get_iterator",))
        return RecordingIter(self)


def _names(calls: list[tuple[Any, ...]]) -> list[str]:
    return [call[0] for call in calls]


@pytest.mark.slow
def test_fresh_iterator_state() -> None:
    loader = DataLoader(list(range(16)), batch_size=2, num_workers=2)
    iterator = iter(loader)
    try:
        for name, expected in FRESH_ITERATOR_STATE.items():
            assert getattr(iterator, name) == expected, name
        assert len(iterator._workers) == 2
        assert all(isinstance(w, multiprocessing.process.BaseProcess) for w in iterator._workers)
        assert len(iterator._index_queues) == 2
        assert all(callable(q.put) for q in iterator._index_queues)
        assert callable(iterator._data_queue.get)
        assert callable(iterator._workers_done_event.set)
        assert iterator._index_sampler is loader._index_sampler
        assert next(iterator._sampler_iter) == [8, 9]  # 4 batches already sent
        assert loader._iterator is None  # only persistent loaders keep their iterator
    finally:
        iterator._shutdown_workers()


@pytest.mark.slow
def test_torch_calls_the_hooks_loaderdoctor_overrides() -> None:
    CALLS.clear()
    loader = RecordingLoader(Squares(), batch_size=2, num_workers=2, persistent_workers=True)
    iterator = iter(loader)
    assert loader._iterator is iterator
    assert _names(CALLS)[:2] == ["_get_iterator", "_reset"] and CALLS[1] == ("_reset", True)
    # prefetch: each put asks the sampler for one batch of indices and sends exactly one task
    puts = [c for c in CALLS if c[0] == "_try_put_index"]
    assert puts == [("_try_put_index", 1)] * 4
    assert [c[1] for c in CALLS if c[0] == "_next_index"] == [[0, 1], [2, 3], [4, 5], [6, 7]]

    CALLS.clear()
    first = next(iterator)
    assert first.tolist() == [0, 1]
    assert "_get_data" in _names(CALLS)
    assert ("_try_get_data", torch_compat.MP_STATUS_CHECK_INTERVAL) in CALLS
    processed = [c for c in CALLS if c[0] == "_process_data"]
    assert processed == [("_process_data", "Tensor", 0, True, 1, -1)]

    batches: list[Any] = []
    with pytest.raises(KeyError) as error:  # sample 13 raises in a worker
        while True:
            batches.append(next(iterator))
    assert "thirteen" in str(error.value)
    wrapped = [c for c in CALLS if c[0] == "_process_data" and c[1] == "ExceptionWrapper"]
    assert wrapped == [("_process_data", "ExceptionWrapper", 0, True, 1, -1)]
    assert [b.tolist() for b in batches] == [[4, 9], [16, 25], [36, 49], [64, 81], [100, 121]]
    rest = list(iterator)  # torch carries on after a worker's exception
    assert [b.tolist() for b in rest] == [[196, 225]]

    CALLS.clear()
    again = iter(loader)  # persistent: the same iterator, reset for the next epoch
    assert again is iterator
    assert CALLS[0] == ("_reset", False)
    assert "_get_iterator" not in _names(CALLS)
    del again, iterator, error
    gc.collect()  # torch's reraise() leaves a traceback cycle that holds the iterator
    CALLS.clear()
    del loader  # refcount: torch's __del__ shuts the workers down at once
    assert ("_shutdown_workers", False) in CALLS


def parameter_shape(function: Any) -> list[tuple[str, Any]]:
    """(name, default) of each parameter, ``self`` included."""
    return [(p.name, p.default) for p in inspect.signature(function).parameters.values()]


def supervised_classes() -> list[tuple[type, type]]:
    """(our class, the torch class whose hooks it overrides)."""
    from loaderdoctor.supervise.loader import DataLoader as SupervisedLoader
    from loaderdoctor.supervise.parent.iterator import SupervisedMultiProcessingIter
    from loaderdoctor.supervise.parent.single_process import SupervisedSingleProcessIter

    return [
        (SupervisedMultiProcessingIter, MP_ITER),
        (SupervisedSingleProcessIter, SINGLE_ITER),
        (SupervisedLoader, DataLoader),
    ]


def test_torch_calls_each_override_directly_with_its_own_parameters() -> None:
    """Every torch hook a supervised class overrides is its ``ld_`` method itself under torch's
    name: no forwarding call on a clean run's path, and the parameters torch passes
    (by name too: ``_reset(loader, first_iter=True)``) are the override's."""
    for ours, theirs in supervised_classes():
        hooks = dict(ours.LD_HOOKS)  # type: ignore[attr-defined]
        assert ours._ld_aliases == hooks  # type: ignore[attr-defined]  # it overrides them all
        for torch_name, ld_name in hooks.items():
            assert vars(ours)[torch_name] is getattr(ours, ld_name), (ours.__name__, torch_name)
            torch_shape = parameter_shape(getattr(theirs, torch_name))
            assert parameter_shape(getattr(ours, ld_name)) == torch_shape, (ours, ld_name)


def test_a_hook_a_subclass_overrides_itself_stays_its_own() -> None:
    """A user's subclass of ours that overrides torch's hook by torch's name keeps it, and so do
    its subclasses; its ``super()`` call reaches ours, and torch's after it."""
    from loaderdoctor.supervise.loader import DataLoader as SupervisedLoader
    from loaderdoctor.supervise.parent.single_process import SupervisedSingleProcessIter

    calls: list[str] = []

    class Mine(SupervisedLoader[int]):
        def _get_iterator(self) -> Any:
            calls.append("mine")
            return super()._get_iterator()

    class Below(Mine):
        pass

    assert Below._get_iterator is Mine._get_iterator
    assert torch_compat.HookedDataLoader._get_iterator is DataLoader._get_iterator
    iterator = iter(Below([1, 2, 3], batch_size=2))
    assert calls == ["mine"]
    assert type(iterator) is SupervisedSingleProcessIter
    assert [b.tolist() for b in iterator] == [[1, 2], [3]]


@pytest.mark.slow
def test_timeout_goes_through_try_get_data() -> None:
    CALLS.clear()
    loader = RecordingLoader(list(range(4)), batch_size=2, num_workers=1, timeout=30)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]
    assert ("_try_get_data", 30) in CALLS
    assert ("_shutdown_workers", False) in CALLS  # a non-persistent epoch ends with a shutdown


class ViewOf:
    """The loader as torch's iterator reads it, some attributes replaced (what loaderdoctor does)."""

    def __init__(self, loader: Any, **overrides: Any) -> None:
        self._loader = loader
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def _double(batch: list[int]) -> list[int]:
    return [2 * x for x in batch]


def test_single_process_iterator_reads_the_substituted_attributes() -> None:
    loader = DataLoader(list(range(6)), batch_size=2)
    view = ViewOf(
        loader, dataset=list(range(10, 16)), collate_fn=_double, _index_sampler=[[4, 5], [0, 1]]
    )
    iterator = SINGLE_ITER(view)
    assert list(iterator) == [[28, 30], [20, 22]]


@pytest.mark.slow
def test_multiprocessing_iterator_reads_the_substituted_attributes() -> None:
    loader = DataLoader(list(range(6)), batch_size=2, num_workers=2, prefetch_factor=4)
    generator = torch.Generator().manual_seed(7)
    replay = torch.Generator()
    replay.set_state(generator.get_state())  # healing replays the state to draw the same seed
    expected_seed = torch.empty((), dtype=torch.int64).random_(generator=replay).item()
    view = ViewOf(
        loader,
        dataset=list(range(10, 16)),
        collate_fn=_double,
        _index_sampler=[[4, 5], [0, 1]],
        num_workers=1,
        prefetch_factor=1,
        timeout=20,
        generator=generator,
        worker_init_fn=_double_check_seed,
    )
    iterator = MP_ITER(view)
    try:
        assert (iterator._num_workers, iterator._prefetch_factor, iterator._timeout) == (1, 1, 20)
        assert iterator._base_seed == expected_seed
        assert list(iterator) == [[28, 30], [20, 22]]
    finally:
        iterator._shutdown_workers()


def _double_check_seed(worker_id: int) -> None:
    info = torch.utils.data.get_worker_info()
    assert info is not None and info.num_workers == 1 and info.id == worker_id == 0


# --- every torch private loaderdoctor's source mentions is in the contract above --------------
OTHER_ITERATOR_ATTRIBUTES = (
    # the loader's: torch's __init__ ran to its end (runner: a subclass that never calls it)
    "_DataLoader__initialized",
    "_workers",
    "_data_queue",
    "_index_queues",
    "_workers_done_event",
    "_sampler_iter",
    "_index_sampler",
    "_dataset_kind",
    "_iterator",
    "_base_seed",
    # what a respawned worker is started with (torch_compat.worker_loop_args)
    "_worker_result_queue",
    "_dataset",
    "_auto_collation",
    "_collate_fn",
    "_drop_last",
    "_worker_init_fn",
    "_persistent_workers",
    "_shared_seed",
    "_tasks_outstanding",
    "_pin_memory",
)


def test_worker_loop_parameters_are_a_known_layout() -> None:
    assert torch_compat.WORKER_LOOP_PARAMETERS in torch_compat.KNOWN_WORKER_LOOP_PARAMETERS, (
        "torch changed _worker_loop's parameters: update torch_compat.worker_loop_args"
    )


class _RecordingProcess(multiprocessing.get_context("fork").Process):  # type: ignore[name-defined,misc]
    started_with: ClassVar[list[tuple[Any, ...]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Process.start() deletes its _args: keep what torch passed
        type(self).started_with.append(tuple(kwargs["args"]))


class _RecordingContext(type(multiprocessing.get_context("fork"))):  # type: ignore[misc]
    Process = _RecordingProcess


@pytest.mark.slow
@pytest.mark.parametrize("persistent", [False, True])
def test_worker_loop_args_are_what_torch_started_each_worker_with(persistent: bool) -> None:
    """A respawned worker must be started exactly as torch's __init__ started the dead one."""
    _RecordingProcess.started_with.clear()
    loader = DataLoader(
        list(range(8)),
        batch_size=2,
        num_workers=2,
        persistent_workers=persistent,
        worker_init_fn=_noop_init,
        collate_fn=_identity_collate,
        multiprocessing_context=_RecordingContext(),
    )
    iterator = iter(loader)
    try:
        assert len(_RecordingProcess.started_with) == 2
        for worker_id, torchs in enumerate(_RecordingProcess.started_with):
            index_queue = iterator._index_queues[worker_id]
            ours = torch_compat.worker_loop_args(iterator, worker_id, index_queue)
            assert len(ours) == len(torchs) == len(torch_compat.WORKER_LOOP_PARAMETERS)
            for name, mine, theirs in zip(torch_compat.WORKER_LOOP_PARAMETERS, ours, torchs):
                if name == "dataset_holder":  # a fresh one-item list each time, by design
                    assert type(mine) is list and mine == [iterator._dataset], name
                else:
                    assert mine is theirs or mine == theirs, name
    finally:
        iterator._shutdown_workers()


def _noop_init(worker_id: int) -> None:
    pass


def _identity_collate(batch: Any) -> Any:
    return batch


@pytest.mark.slow
def test_result_queue_writer_lock_is_multiprocessings() -> None:
    loader = DataLoader(list(range(4)), batch_size=2, num_workers=1)
    iterator = iter(loader)
    try:
        lock = torch_compat.result_queue_writer_lock(iterator)
        assert lock is iterator._worker_result_queue._wlock
        assert lock.acquire(timeout=1)
        lock.release()
    finally:
        iterator._shutdown_workers()


@pytest.mark.slow
def test_every_torch_private_in_our_source_is_in_the_contract() -> None:
    loader = DataLoader(list(range(8)), batch_size=2, num_workers=1)
    iterator = iter(loader)
    try:
        single = iter(DataLoader([1, 2]))
        torch_names = {
            name
            for obj in (iterator, single, loader)
            for name in dir(obj)
            if not name.startswith("__")
        }
    finally:
        iterator._shutdown_workers()
    mentioned: set[str] = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        mentioned |= set(re.findall(r"\.(_[A-Za-z]\w*)", text))
        mentioned |= set(re.findall(r"[\"'](_[A-Za-z]\w*)[\"']", text))
        mentioned |= set(re.findall(r"\b(_[A-Za-z]\w*)=", text))
    contract = (
        {name for _, name in METHOD_SIGNATURES if name != "__init__"}
        | set(FRESH_ITERATOR_STATE)
        | set(OTHER_ITERATOR_ATTRIBUTES)
    )
    unlisted = sorted((mentioned & torch_names) - contract)
    assert not unlisted, f"loaderdoctor reaches into torch's {unlisted}: add them to this contract"
    assert contract <= torch_names, f"torch no longer has {sorted(contract - torch_names)}"


# --- no torch private outside torch_compat ------------------------------------------
# Nowhere but in torch_compat (torchdata_compat for torchdata's) may code reach into torch: the
# subclasses override torch's hooks through the Hooked* bases, and read torch's state through
# them (IteratorBooks, ...). torchdata is imported only in torchdata_compat, so
# that it stays optional in one place.
COMPAT_MODULES = {"torch_compat.py", "torchdata_compat.py"}


def torch_privates_in(source: str, torch_names: set[str]) -> list[str]:
    """Every reach into torch's privates in ``source``: an import of a private torch module or
    name, any import of torchdata, and an attribute access by one of torch's (or torchdata's)
    private names, ``self.<name>`` of a class of our own included: an attribute of ours under a
    name of torch's is where an alias of torch's own state hides."""
    tree = ast.parse(source)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = " ".join(ast.unparse(base) for base in node.bases)
            if not re.search(r"torch|DataLoader|Iter\b", bases):
                continue
            for inner in node.body:  # an override of torch's hook by torch's name
                if isinstance(inner, ast.FunctionDef) and inner.name in torch_names:
                    found.append(f"line {inner.lineno}: def {inner.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                if root == "torchdata" or (root == "torch" and "._" in alias.name):
                    found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            private = [a.name for a in node.names if a.name.startswith("_")]
            if root == "torchdata" or (root == "torch" and ("._" in node.module or private)):
                found.append(f"line {node.lineno}: from {node.module} import {private or '...'}")
        elif isinstance(node, ast.Attribute) and node.attr in torch_names:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.keyword) and node.arg in torch_names:
            found.append(f"line {node.lineno}: {node.arg}=")  # an override of a loader's private
        elif isinstance(node, ast.Constant) and node.value in torch_names:
            found.append(f"line {node.lineno}: {node.value!r}")  # getattr(x, "_private")
    return found


PLANTED = {
    "from torch.utils.data._utils.pin_memory import pin_memory\n": "line 1: from",
    "import torch.utils.data._utils.worker\n": "line 1: import",
    "from torch.utils.data import _utils\n": "line 1: from",
    "def owed(it):\n    return it._task_info\n": "line 2: ._task_info",
    "def done(it):\n    return getattr(it, '_shutdown', True)\n": "line 2: '_shutdown'",
    "view = snapshot.with_overrides(_index_sampler=[])\n": "line 1: _index_sampler=",
    "class Mine:\n    def f(self, loader):\n        return loader._dataset_kind\n": "line 3:",
    "class Sub(torch_compat.MultiProcessingIter):\n    def f(self):\n        return self._rcvd_idx\n": (
        "line 3: ._rcvd_idx"
    ),
    "from torchdata.stateful_dataloader import StatefulDataLoader\n": "line 1: from torchdata",
    "import torchdata.stateful_dataloader\n": "line 1: import torchdata",
    "class It(torchdata_compat.HookedStatefulIter):\n    def f(self):\n        self._finished = 1\n": (
        "line 3: ._finished"
    ),
    "class It(torchdata_compat.HookedStatefulIter):\n    def _task_info(self):\n        pass\n": (
        "line 2: def _task_info"
    ),
}


@pytest.mark.parametrize("planted", sorted(PLANTED))
def test_the_scan_finds_a_planted_reach_into_torch(planted: str) -> None:
    names = {"_task_info", "_dataset_kind", "_rcvd_idx", "_workers", "_shutdown", "_index_sampler"}
    names.add("_finished")  # torchdata's
    found = torch_privates_in(planted, names)
    assert len(found) == 1 and found[0].startswith(PLANTED[planted]), found


def test_the_scan_finds_an_alias_of_torchs_state_under_torchs_name() -> None:
    own = "class Pool:\n    def f(self):\n        return self._workers\n"
    assert torch_privates_in(own, {"_workers"}) == ["line 3: ._workers"]
    assert (
        torch_privates_in("class Visitor:\n    def _workers(self):\n        pass\n", {"_workers"})
        == []
    )


def torchdata_private_names() -> set[str]:
    """The private names of torchdata's StatefulDataLoader and its multiprocessing iterator (none
    without torchdata: the eco extra installs it, and CI has it)."""
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ModuleNotFoundError:
        return set()
    loader = StatefulDataLoader(list(range(8)), batch_size=2, num_workers=1)
    iterator = iter(loader)
    try:
        objects = (iterator, loader)
        return {n for o in objects for n in dir(o) if n.startswith("_") and not n.startswith("__")}
    finally:
        iterator._shutdown_workers()


@pytest.mark.slow
def test_no_torch_private_outside_torch_compat() -> None:
    loader = DataLoader(list(range(8)), batch_size=2, num_workers=1)
    iterator = iter(loader)
    try:
        single = iter(DataLoader([1, 2]))
        torch_names = {
            name
            for obj in (iterator, single, loader)
            for name in dir(obj)
            if name.startswith("_") and not name.startswith("__")
        }
    finally:
        iterator._shutdown_workers()
    torch_names |= torchdata_private_names()
    reaches = {}
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative in COMPAT_MODULES:
            continue
        found = torch_privates_in(path.read_text(encoding="utf-8"), torch_names)
        if found:
            reaches[relative] = found
    assert reaches == {}, f"reaches into torch outside torch_compat: {reaches}"


@pytest.mark.slow
def test_worker_pids_are_the_iterators_own_workers() -> None:
    import psutil

    loader = DataLoader(list(range(8)), batch_size=2, num_workers=2)
    iterator = iter(loader)
    try:
        pids = torch_compat.worker_pids(iterator)
        children = {child.pid for child in psutil.Process().children()}
        assert len(pids) == 2 and pids <= children
    finally:
        iterator._shutdown_workers()
    assert torch_compat.worker_pids(iter(DataLoader([1, 2]))) == set()


# --- the torch releases: pip's floor, the tested range, and the README say the same -----------
ROOT = Path(__file__).resolve().parents[1]


def _pyproject_torch_requirement() -> str:
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (requirement,) = [r for r in data["project"]["dependencies"] if r.startswith("torch")]
    return requirement.removeprefix("torch").strip()


def test_pip_requires_the_floor_of_the_tested_range_and_no_ceiling() -> None:
    # A ceiling would make pip downgrade (or refuse) a user's newer torch; outside the tested
    # range the loader warns once and runs as plain torch instead.
    floor = torch_compat.TESTED_TORCH_RANGE.split(",")[0]
    assert floor == ">=2.13"
    assert _pyproject_torch_requirement() == floor


def test_readme_states_the_tested_range() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"(`torch{torch_compat.TESTED_TORCH_RANGE}`)" in readme


def test_the_known_dataloader_signature_is_torchs() -> None:
    # The linter reads calls by it and the loader runs an unknown keyword as plain torch.
    from loaderdoctor import torch_signature

    parameters = list(inspect.signature(torch.utils.data.DataLoader.__init__).parameters.values())
    positional = [
        p.name for p in parameters[1:] if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    ]
    keyword_only = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert tuple(positional) == torch_signature.POSITIONAL
    assert tuple(keyword_only) == torch_signature.KEYWORD_ONLY
