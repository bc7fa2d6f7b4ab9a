"""Every reach into PyTorch's private DataLoader internals, in one place.

loaderdoctor subclasses the stock iterators so that a clean run takes exactly torch's code path.
These are the private names it relies on; ``tests/test_torch_compat.py`` fails loudly when a torch
release moves one of them.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

import torch
import torch.utils.data.dataloader as _dataloader
from torch._utils import ExceptionWrapper, KeyErrorMessage
from torch.utils.data import _utils
from torch.utils.data._utils import worker as _worker


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
# torch; outside this range the supervised loader warns once and runs as plain torch (issue 13).
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
    dataset: Any = None,
    worker_init_fn: Any = None,
) -> tuple[Any, ...]:
    """The arguments torch's iterator gives ``_worker_loop`` for worker ``worker_id``.

    A replacement worker started with them takes the dead one's place exactly: same
    ``worker_id``, same ``base_seed`` (so ``torch.initial_seed()`` is ``base_seed + worker_id``
    again), the iterator's result queue and done event. ``dataset`` and ``worker_init_fn``
    replace the iterator's own (an updated quarantine, a per-worker resume).
    """
    if dataset is None:
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


def result_queue_writer_lock(iterator: Any) -> Any:
    """The lock every worker's feeder thread holds while it writes a batch to the result queue.

    multiprocessing's private ``Queue._wlock`` (None on Windows, where pipes write atomically). A
    worker killed while holding it leaves it held for ever and, maybe, half a message in the pipe.
    """
    return getattr(iterator._worker_result_queue, "_wlock", None)


def is_exception_wrapper(data: Any) -> bool:
    return isinstance(data, ExceptionWrapper)


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
    "IterableDatasetStopIteration",
    "KeyErrorMessage",
    "MultiProcessingIter",
    "ResumeIteration",
    "SingleProcessIter",
    "is_exception_wrapper",
    "loader_init_finished",
    "multiprocessing_context_of",
    "result_queue_writer_lock",
    "show_user_dataset_in_worker_info",
    "stop_sigchld_checks",
    "worker_loop_args",
]
