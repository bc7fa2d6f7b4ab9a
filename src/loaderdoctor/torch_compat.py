"""Every reach into PyTorch's private DataLoader internals, in one place.

loaderdoctor subclasses the stock iterators so that a clean run takes exactly torch's code path.
These are the private names it relies on; ``tests/test_torch_compat.py`` fails loudly when a torch
release moves one of them.
"""

from __future__ import annotations

import dataclasses
import inspect
import multiprocessing
import queue
import re
import weakref
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, TypeVar

import torch
import torch.utils.data.dataloader as _dataloader
from torch._utils import ExceptionWrapper, KeyErrorMessage
from torch.utils.data import _utils
from torch.utils.data._utils import worker as _worker

T_co = TypeVar("T_co", covariant=True)


def _release(text: str) -> tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``: the numeric release, local and pre-release parts dropped."""
    numbers = []
    for part in text.split("+", 1)[0].split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        numbers.append(int(digits.group(0)))
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


_COMPARE = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def in_range(version: str, specifier: str) -> bool:
    """Whether ``version`` meets a plain specifier such as ``">=2.4,<2.15"`` (no wildcards)."""
    have = _release(version)
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        match = re.fullmatch(r"(>=|<=|==|!=|>|<)\s*([\w.]+)", clause)
        if match is None:
            return True  # a form this check does not know: trust the installer
        if not _COMPARE[match.group(1)](have, _release(match.group(2))):
            return False
    return True


# The torch releases the tests run on (CI on the pinned one, scripts/torch_matrix.sh on both ends).
# pip's requirement is only the floor, so that installing loaderdoctor never downgrades a newer
# torch; outside this range the supervised loader warns once and runs as plain torch.
TESTED_TORCH_RANGE = ">=2.13,<2.15"
TORCH_VERSION = torch.__version__
SUPPORTED_RANGE = TESTED_TORCH_RANGE
SUPPORTED = in_range(TORCH_VERSION, TESTED_TORCH_RANGE)

MultiProcessingIter = _dataloader._MultiProcessingDataLoaderIter
SingleProcessIter = _dataloader._SingleProcessDataLoaderIter
DatasetKind = _dataloader._DatasetKind
MP_STATUS_CHECK_INTERVAL: float = _utils.MP_STATUS_CHECK_INTERVAL
ResumeIteration = _worker._ResumeIteration
IterableDatasetStopIteration = _worker._IterableDatasetStopIteration

try:  # DataPipes were removed from recent torch releases
    from torch.utils.data.datapipes.datapipe import IterDataPipe, MapDataPipe

    DATAPIPE_TYPES: tuple[type, ...] = (IterDataPipe, MapDataPipe)
except ImportError:  # pragma: no cover - depends on the torch release
    DATAPIPE_TYPES = ()

PRIVATE_NAMES = (
    "torch.utils.data.dataloader._MultiProcessingDataLoaderIter",
    "torch.utils.data.dataloader._SingleProcessDataLoaderIter",
    "torch.utils.data._utils.worker._worker_info",
    "torch.utils.data._utils.signal_handling._remove_worker_pids",
)

# Attributes of _MultiProcessingDataLoaderIter that the supervisor reads or overrides.
ITERATOR_ATTRIBUTES = (
    "_workers",
    "_workers_status",
    "_task_info",
    "_send_idx",
    "_rcvd_idx",
    "_workers_num_tasks",
    "_data_queue",
    "_index_queues",
    "_shutdown",
    "_worker_pids_set",
    "_try_get_data",
    "_get_data",
    "_process_data",
    "_try_put_index",
    "_next_index",
    "_next_data",
    "_shutdown_workers",
    "_mark_worker_as_unavailable",
    "_worker_result_queue",
    "_workers_done_event",
    "_dataset_kind",
    "_dataset",
    "_auto_collation",
    "_collate_fn",
    "_drop_last",
    "_base_seed",
    "_worker_init_fn",
    "_num_workers",
    "_persistent_workers",
    "_shared_seed",
    "_tasks_outstanding",
)


def loader_init_finished(loader: Any) -> bool:
    """torch's ``DataLoader.__init__`` ran to its end (it sets its private ``__initialized``
    last; a subclass whose own ``__init__`` never calls it, torchdata's StatefulDataLoader, or
    one still being built, has not)."""
    return bool(vars(loader).get("_DataLoader__initialized"))


def worker_pids(iterator: Any) -> set[int]:
    """The pids of a multiprocessing iterator's workers (``_workers``); empty for in-process."""
    return {process.pid for process in getattr(iterator, "_workers", ()) if process.pid}


def stop_sigchld_checks(iterator: Any) -> None:
    """Take the iterator's workers out of torch's SIGCHLD handler.

    torch's handler raises ``RuntimeError: DataLoader worker ... is killed by signal`` from a
    signal handler, i.e. at whatever line the main thread is executing (often inside the user's
    training step), before anyone can collect evidence. The supervisor watches its own workers
    and raises the verdict from ``__next__`` instead.
    """
    if getattr(iterator, "_worker_pids_set", False):
        _utils.signal_handling._remove_worker_pids(id(iterator))
        iterator._worker_pids_set = False


def interpreter_exiting() -> bool:
    """Python is shutting down (torch's ``python_exit_status``): torch's own exit handlers stop
    the workers, and an iterator's ``__del__`` has nothing left to do."""
    return _utils is None or _utils.python_exit_status is not False


def show_user_dataset_in_worker_info(dataset: Any) -> None:
    """Make ``get_worker_info().dataset`` the user's dataset object, not loaderdoctor's wrapper.

    worker_init_fn commonly configures ``get_worker_info().dataset`` (IterableDataset sharding);
    the wrapper forwards to that very object, so the configuration takes effect.
    """
    info = _worker._worker_info
    if info is None:
        return
    _worker._worker_info = dataclasses.replace(info, dataset=dataset)


# The parameters of torch's ``_worker_loop``, in order, as ``_MultiProcessingDataLoaderIter``
# passes them; ``worker_loop_args`` fills them for one worker. torch 2.14 passes the dataset in a
# one-item list that the worker pops (``dataset_holder``), so that the Process does not keep it.
WORKER_LOOP = _worker._worker_loop
WORKER_LOOP_PARAMETERS = tuple(inspect.signature(WORKER_LOOP).parameters)
KNOWN_WORKER_LOOP_PARAMETERS = (
    (
        "dataset_kind",
        "dataset",  # torch 2.13
        "index_queue",
        "data_queue",
        "done_event",
        "auto_collation",
        "collate_fn",
        "drop_last",
        "base_seed",
        "init_fn",
        "worker_id",
        "num_workers",
        "persistent_workers",
        "shared_seed",
    ),
    (
        "dataset_kind",
        "dataset_holder",  # torch 2.14
        "index_queue",
        "data_queue",
        "done_event",
        "auto_collation",
        "collate_fn",
        "drop_last",
        "base_seed",
        "init_fn",
        "worker_id",
        "num_workers",
        "persistent_workers",
        "shared_seed",
    ),
)
DATASET_IN_HOLDER = WORKER_LOOP_PARAMETERS[1:2] == ("dataset_holder",)


def worker_loop_args(
    iterator: Any,
    worker_id: int,
    index_queue: Any,
    *,
    worker_init_fn: Any = None,
) -> tuple[Any, ...]:
    """The arguments torch's iterator gives ``_worker_loop`` for worker ``worker_id``.

    A replacement worker started with them takes the dead one's place exactly: same
    ``worker_id``, same ``base_seed`` (so ``torch.initial_seed()`` is ``base_seed + worker_id``
    again), the iterator's dataset, result queue and done event. ``worker_init_fn`` replaces the
    iterator's own (a per-worker resume).
    """
    dataset = iterator._dataset
    return (
        iterator._dataset_kind,
        [dataset] if DATASET_IN_HOLDER else dataset,
        index_queue,
        iterator._worker_result_queue,
        iterator._workers_done_event,
        iterator._auto_collation,
        iterator._collate_fn,
        iterator._drop_last,
        iterator._base_seed,
        iterator._worker_init_fn if worker_init_fn is None else worker_init_fn,
        worker_id,
        iterator._num_workers,
        iterator._persistent_workers,
        iterator._shared_seed,
    )


def multiprocessing_context_of(iterator_or_loader: Any) -> Any:
    """The context torch's iterator starts its workers with (``torch.multiprocessing`` by default)."""
    import torch.multiprocessing

    return getattr(iterator_or_loader, "multiprocessing_context", None) or torch.multiprocessing


def start_method_of(loader: Any) -> str:
    """The start method of the loader's multiprocessing context (the default one's if unset)."""
    context = loader.multiprocessing_context or multiprocessing
    method = context.get_start_method(allow_none=True)
    return method or multiprocessing.get_all_start_methods()[0]


def result_queue_writer_lock(iterator: Any) -> Any:
    """The lock every worker's feeder thread holds while it writes a batch to the result queue.

    multiprocessing's private ``Queue._wlock`` (None on Windows, where pipes write atomically). A
    worker killed while holding it leaves it held for ever and, maybe, half a message in the pipe.
    """
    return getattr(iterator._worker_result_queue, "_wlock", None)


def is_exception_wrapper(data: Any) -> bool:
    return isinstance(data, ExceptionWrapper)


def dataset_kind(loader: Any) -> Any:
    """A loader's ``_dataset_kind`` (``DatasetKind.Map`` or ``DatasetKind.Iterable``)."""
    return loader._dataset_kind


def is_iterable(loader: Any) -> bool:
    """The loader (or its snapshot) reads an ``IterableDataset``."""
    return bool(loader._dataset_kind == DatasetKind.Iterable)


def pin_memory(batch: Any, device: Any = None) -> Any:
    """torch's pin thread's own ``pin_memory`` of a batch (what a batch wrapper pins inside)."""
    from torch.utils.data._utils.pin_memory import pin_memory as pin

    return pin(batch, device) if device is not None else pin(batch)


class Hooks:
    """Base of the ``Hooked*`` classes: a subclass overrides ``ld_<hook>`` (and calls
    ``super().ld_<hook>()`` for torch's own behaviour), and torch calls it directly.

    ``LD_HOOKS`` pairs each of torch's private hooks with its ``ld_`` name; the classes made with
    ``ld_base=True`` (here and in ``torchdata_compat``) give the ``ld_`` defaults, torch's own
    behaviour. When a subclass is made, every hook whose ``ld_`` method it overrides is bound to
    that very function under torch's name as well: torch's ``self._next_index()`` runs the
    override with no forwarding call in between (a clean run's cost), and only these modules
    name torch's hooks. A hook that a class in between defines itself (a user's subclass
    overriding ``_get_iterator``) stays as it is. A class's own ``_ld_aliases`` says which
    hooks it bound (torch name -> ``ld_`` name).
    """

    LD_HOOKS: tuple[tuple[str, str], ...] = ()
    _ld_aliases: ClassVar[dict[str, str]] = {}
    _ld_base: ClassVar[bool] = True

    def __init_subclass__(cls, ld_base: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._ld_base = ld_base
        if ld_base:
            _torchs_own_as_defaults(cls)
        cls._ld_aliases = {} if ld_base else _bind_hooks(cls)


def _torchs_own_as_defaults(cls: type) -> None:
    """In a ``Hooked`` class on top of torch's (or torchdata's) class, each ``ld_`` default is
    torch's own function, so that an override's ``super().ld_<hook>()`` runs torch's with no
    call in between. A mixin with no torch class under it keeps its ``super()`` defaults."""
    mro = cls.__mro__
    for declared_in in mro:
        for torch_name, ld_name in vars(declared_in).get("LD_HOOKS", ()):
            torchs = next(
                (k for k in mro if torch_name in vars(k) and Hooks not in k.__mro__), None
            )
            if torchs is not None:
                setattr(cls, ld_name, vars(torchs)[torch_name])


def _bind_hooks(cls: type) -> dict[str, str]:
    """Bind each hook ``cls`` overrides under torch's name (see ``Hooks``)."""
    aliases: dict[str, str] = {}
    seen: set[str] = set()
    mro = cls.__mro__
    for declared_in in mro:  # the nearest class that lists a hook decides
        for torch_name, ld_name in vars(declared_in).get("LD_HOOKS", ()):
            if torch_name in seen or torch_name in vars(cls):
                continue
            seen.add(torch_name)
            owner = next((k for k in mro if torch_name in vars(k)), None)
            if owner is None or mro.index(owner) > mro.index(declared_in):  # torch's own hook
                provider = next((k for k in mro if ld_name in vars(k)), None)
                if provider is None or vars(provider).get("_ld_base", False):
                    continue  # not overridden (or a mixin without it): torch's hook runs as is
            elif vars(owner).get("_ld_aliases", {}).get(torch_name) != ld_name:
                continue  # a class in between defines it, and calls on by super()
            aliases[torch_name] = ld_name
            setattr(cls, torch_name, getattr(cls, ld_name))
    return aliases


class WorkerLists:
    """torch's lists of one iterator's worker processes and their index queues (torch appends to
    them, never rebinds them), and its done event: a worker is replaced in place, here alone."""

    __slots__ = ("_index_queues", "_workers", "done_event")

    def __init__(self, workers: list[Any], index_queues: list[Any], done_event: Any) -> None:
        self._workers, self._index_queues, self.done_event = workers, index_queues, done_event

    @property
    def processes(self) -> list[Any]:
        return self._workers

    @property
    def index_queues(self) -> list[Any]:
        return self._index_queues

    def put_index_queue(self, worker_id: int, index_queue: Any) -> None:
        self._index_queues[worker_id] = index_queue

    def put_process(self, worker_id: int, process: Any) -> None:
        self._workers[worker_id] = process


class MultiProcessingHooks(Hooks, ld_base=True):
    """The hooks of torch's multiprocessing iterator, with torch's behaviour as the default; a
    mixin before torch's iterator, or before torchdata's copy of it, which has the same hooks
    (``_reset`` and ``_process_data`` take more there: each ``Hooked`` class defines those two).

    A subclass overrides ``ld_<hook>`` and calls ``super().ld_<hook>()`` for torch's own
    behaviour, so that the names of torch's hooks (checked by ``tests/test_torch_compat.py``)
    appear only here.
    """

    # torch's and torchdata's take different parameters (see the Hooked classes)
    ld_reset: Callable[..., None]
    ld_process_data: Callable[..., Any]

    LD_HOOKS = (
        ("_next_index", "ld_next_index"),
        ("_try_put_index", "ld_try_put_index"),
        ("_reset", "ld_reset"),
        ("_try_get_data", "ld_try_get_data"),
        ("_get_data", "ld_get_data"),
        ("_process_data", "ld_process_data"),
        ("_next_data", "ld_next_data"),
        ("_mark_worker_as_unavailable", "ld_mark_worker_as_unavailable"),
        ("_shutdown_workers", "ld_shutdown_workers"),
    )

    def ld_next_index(self) -> Any:
        return super()._next_index()  # type: ignore[misc]

    def ld_try_put_index(self) -> None:
        super()._try_put_index()  # type: ignore[misc]

    def ld_try_get_data(self, timeout: float = MP_STATUS_CHECK_INTERVAL) -> Any:
        return super()._try_get_data(timeout)  # type: ignore[misc]

    def ld_get_data(self) -> Any:
        return super()._get_data()  # type: ignore[misc]

    def ld_next_data(self) -> Any:
        return super()._next_data()  # type: ignore[misc]

    def ld_mark_worker_as_unavailable(self, worker_id: int, shutdown: bool = False) -> None:
        super()._mark_worker_as_unavailable(worker_id, shutdown)  # type: ignore[misc]

    def ld_shutdown_workers(self) -> None:
        super()._shutdown_workers()  # type: ignore[misc]


class HookedMultiProcessingIter(MultiProcessingHooks, MultiProcessingIter, ld_base=True):
    """torch's multiprocessing iterator whose private hooks are loaderdoctor's ``ld_*`` methods
    (``ld_reset(loader, first_iter=False)``, ``ld_process_data(data, worker_idx)``, ...)."""


class LoaderHooks(Hooks, ld_base=True):
    """A DataLoader whose ``_get_iterator`` is ``ld_get_iterator`` (as above)."""

    _iterator: Any
    LD_HOOKS = (("_get_iterator", "ld_get_iterator"),)

    def ld_get_iterator(self) -> Any:
        return super()._get_iterator()  # type: ignore[misc]

    @property
    def ld_iterator(self) -> Any:
        """The persistent workers' iterator torch keeps (``_iterator``), or None."""
        return self._iterator

    @ld_iterator.setter
    def ld_iterator(self, value: Any) -> None:
        self._iterator = value


def own_iterator_class(cls: type) -> type | None:
    """The class that defines ``cls``'s ``_get_iterator`` where that is not our hook (litdata's
    ``StreamingDataLoader``, a user's override): it may build an iterator of its own."""
    if getattr(cls, "_get_iterator", None) is getattr(cls, "ld_get_iterator", None):
        return None
    return next((k for k in cls.__mro__ if "_get_iterator" in vars(k)), cls)


class HookedDataLoader(LoaderHooks, torch.utils.data.DataLoader[T_co], ld_base=True):
    """torch's DataLoader whose ``_get_iterator`` is ``ld_get_iterator``."""


class HookedSingleProcessIter(Hooks, SingleProcessIter, ld_base=True):
    """torch's in-process iterator whose hooks are ``ld_*`` methods (as above)."""

    LD_HOOKS = (("_next_index", "ld_next_index"), ("_next_data", "ld_next_data"))
    ld_next_index: Callable[[], Any]  # torch's own (see Hooks)
    ld_next_data: Callable[[], Any]

    def ld_rest(self) -> tuple[Any, Any]:
        """(the sampler's iterator where it stands, the index sampler): the epoch's rest."""
        return self._sampler_iter, self._index_sampler


def loader_state(loader: Any) -> dict[str, Any]:
    """A loader's instance attributes, all that torch's iterators read of it, without the
    persistent workers' iterator (``_iterator``) that a snapshot must not keep alive."""
    return {k: v for k, v in vars(loader).items() if k != "_iterator"}


def sampling_from(batch_sampler: Any) -> dict[str, Any]:
    """The override of a loader snapshot that makes torch's iterator draw its indices from
    ``batch_sampler`` (its ``_index_sampler``): a resumed epoch."""
    return {"_index_sampler": batch_sampler}


def next_data(iterator: Any) -> Any:
    """torch's ``_next_data`` of any of torch's iterators (a successor, plain torch's)."""
    return iterator._next_data()


def shut_down(iterator: Any) -> None:
    """Stop an iterator's workers (``_shutdown_workers``; an in-process iterator has none)."""
    stop = getattr(iterator, "_shutdown_workers", None)
    if stop is not None:
        stop()


class IteratorBooks:
    """torch's bookkeeping of one multiprocessing iterator, read and written only here.

    ``_task_info`` (task -> ``(worker_id,)`` while outstanding, ``(worker_id, data)`` once
    received ahead of its turn), ``_tasks_outstanding``, ``_workers_status``,
    ``_workers_num_tasks``, the result queue and the settings torch's ``__init__`` copied from
    the loader. It holds the iterator by a weak reference, so the parts that keep it (the
    iterator's ``Recovery``) form no reference cycle with the iterator.
    """

    __slots__ = ("_ref",)

    def __init__(self, iterator: Any) -> None:
        self._ref = weakref.ref(iterator)

    @property
    def _it(self) -> Any:
        iterator = self._ref()
        if iterator is None:
            raise ReferenceError("the iterator these books belong to was freed")
        return iterator

    # --- settings torch copied from the loader ------------------------------------------
    @property
    def timeout(self) -> float:
        return self._it._timeout  # as the user gave it, 3 or 3.0 (torch's message says it so)

    @property
    def num_workers(self) -> int:
        return int(self._it._num_workers)

    @property
    def prefetch_factor(self) -> int:
        return int(self._it._prefetch_factor)

    @property
    def pin_memory(self) -> bool:
        return bool(self._it._pin_memory)

    @property
    def drop_last(self) -> bool:
        return bool(self._it._drop_last)

    @property
    def worker_init_fn(self) -> Any:
        return self._it._worker_init_fn

    @property
    def sampler_iter(self) -> Iterator[Any]:
        return self._it._sampler_iter

    @property
    def index_sampler(self) -> Any:
        return self._it._index_sampler

    def start_sampler_pass(self) -> None:
        """A new pass of the sampler, as torch's ``_reset`` starts one for each epoch (it draws
        nothing until read: a pool stopped before the reset hands its successor this pass)."""
        self._it._sampler_iter = iter(self._it._index_sampler)

    # --- the books --------------------------------------------------------------------------
    @property
    def sent(self) -> int:
        """How many tasks were sent to workers so far (``_send_idx``)."""
        return int(self._it._send_idx)

    @property
    def task_in_turn(self) -> tuple[Any, ...] | None:
        """The books' entry of the task whose turn it is (``_task_info[_rcvd_idx]``)."""
        it = self._it
        return it._task_info.get(it._rcvd_idx)

    def task_done(self, worker_id: int) -> None:
        """A task of ``worker_id`` came back (an exception): it has one task fewer."""
        self._it._workers_num_tasks[worker_id] -= 1

    @property
    def task_info(self) -> dict[int, tuple[Any, ...]]:
        """The live ``_task_info`` (read it; change it only through these methods)."""
        return self._it._task_info

    @property
    def workers_status(self) -> list[bool]:
        return self._it._workers_status

    def owed_by(self, worker_id: int) -> list[int]:
        """The tasks sent to ``worker_id`` and not received yet, in order."""
        return sorted(
            task
            for task, info in self._it._task_info.items()
            if info[0] == worker_id and len(info) == 1
        )

    def buffered(self) -> list[tuple[int, Any]]:
        """(worker_id, data) of every batch received ahead of its turn (torch's reorder buffer)."""
        return [(info[0], info[1]) for info in self._it._task_info.values() if len(info) == 2]

    def received(self, task: int, worker_id: int, data: Any) -> None:
        """Put ``data`` in the reorder buffer as task ``task``'s (no longer outstanding)."""
        it = self._it
        it._task_info[task] = (worker_id, data)
        it._tasks_outstanding -= 1

    def worker_alive(self, worker_id: int) -> None:
        self._it._workers_status[worker_id] = True

    def recount_tasks(self, worker_id: int) -> None:
        """``_workers_num_tasks[worker_id]`` from the books, after its tasks were re-sent."""
        it = self._it
        it._workers_num_tasks[worker_id] = sum(
            1 for info in it._task_info.values() if info[0] == worker_id
        )

    # --- the result queue ---------------------------------------------------------------------
    @property
    def reads_result_queue(self) -> bool:
        """The main thread reads the workers' result queue itself (no pin-memory thread)."""
        it = self._it
        return it._data_queue is it._worker_result_queue

    @property
    def data_queue(self) -> Any:
        """The queue the main thread reads (``_data_queue``)."""
        return self._it._data_queue

    def receive(self, timeout: float) -> Any:
        """One message from the queue the main thread reads."""
        return self._it._data_queue.get(timeout=timeout)

    def result_queue_writer_lock(self) -> Any:
        return result_queue_writer_lock(self._it)

    def take_ready_results(self, limit: int) -> str:
        """Take every message on the result queue into the reorder buffer (at most ``limit``);
        what could not be read and not be blamed on a dead worker ("" when nothing)."""
        it = self._it
        results = it._worker_result_queue
        for _ in range(limit):
            try:
                task, data = results.get(block=False)
            except queue.Empty:
                return ""
            except (ConnectionError, EOFError, FileNotFoundError):
                # A batch of the dead worker whose tensors cannot be had any more (their file
                # descriptors were to come from its resource sharer): still owed, and re-sent.
                continue
            except Exception as error:  # whose batch it was is unknown: nothing can be re-sent
                return f"{type(error).__name__}: {error}"
            if isinstance(data, IterableDatasetStopIteration):
                # A stream's end, taken as torch's _next_data takes it (no new task is put here:
                # the dead worker's queue is about to be replaced; the next batch puts one).
                it._tasks_outstanding -= 1
                if it._persistent_workers:
                    it._workers_status[data.worker_id] = False
                else:
                    it._mark_worker_as_unavailable(data.worker_id)
                continue
            info = it._task_info.get(task) if isinstance(task, int) else None
            if info is not None and len(info) == 1:
                self.received(task, info[0], data)
        return ""

    # --- workers --------------------------------------------------------------------------
    def processes(self) -> WorkerLists:
        """The worker processes, their index queues and the done event: torch's own."""
        it = self._it
        return WorkerLists(it._workers, it._index_queues, it._workers_done_event)

    def started_workers(self) -> list[Any]:
        """The workers torch's ``__init__`` started before it failed (maybe none)."""
        return list(vars(self._it).get("_workers", []))

    def is_shut_down(self, default: bool = True) -> bool:
        """torch's ``_shutdown`` (``default`` while its ``__init__`` has not set it yet)."""
        return bool(vars(self._it).get("_shutdown", default))

    def mark_shut_down(self) -> None:
        vars(self._it)["_shutdown"] = True

    def stop_sigchld_checks(self) -> None:
        stop_sigchld_checks(self._it)

    def worker_loop_args(
        self, worker_id: int, index_queue: Any, *, worker_init_fn: Any = None
    ) -> tuple[Any, ...]:
        return worker_loop_args(self._it, worker_id, index_queue, worker_init_fn=worker_init_fn)

    def shut_down(self) -> None:
        """torch's own shutdown of the iterator's workers, queues and threads; then the batches
        its reorder buffer received let go: a stopped pool's undelivered batches are loaded again
        by its successor, and kept here their tensors would hold their shared memory (under the
        ``file_descriptor`` strategy one open descriptor each) while the successor starts."""
        it = self._it
        it._shutdown_workers()
        for task, info in list(it._task_info.items()):
            if len(info) == 2:
                it._task_info[task] = info[:1]


__all__ = [
    "DATAPIPE_TYPES",
    "DATASET_IN_HOLDER",
    "ITERATOR_ATTRIBUTES",
    "KNOWN_WORKER_LOOP_PARAMETERS",
    "MP_STATUS_CHECK_INTERVAL",
    "PRIVATE_NAMES",
    "SUPPORTED",
    "SUPPORTED_RANGE",
    "TESTED_TORCH_RANGE",
    "TORCH_VERSION",
    "WORKER_LOOP",
    "WORKER_LOOP_PARAMETERS",
    "DatasetKind",
    "ExceptionWrapper",
    "HookedDataLoader",
    "HookedMultiProcessingIter",
    "HookedSingleProcessIter",
    "Hooks",
    "IterableDatasetStopIteration",
    "IteratorBooks",
    "KeyErrorMessage",
    "LoaderHooks",
    "MultiProcessingHooks",
    "MultiProcessingIter",
    "ResumeIteration",
    "SingleProcessIter",
    "WorkerLists",
    "dataset_kind",
    "interpreter_exiting",
    "is_exception_wrapper",
    "is_iterable",
    "loader_init_finished",
    "loader_state",
    "multiprocessing_context_of",
    "next_data",
    "pin_memory",
    "result_queue_writer_lock",
    "sampling_from",
    "show_user_dataset_in_worker_info",
    "shut_down",
    "start_method_of",
    "stop_sigchld_checks",
    "worker_loop_args",
]
