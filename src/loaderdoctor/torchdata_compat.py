"""Every reach into torchdata's private ``StatefulDataLoader`` internals, in one place.

torchdata is optional (``pip install 'loaderdoctor[torchdata]'``): this module imports it, and
without it raises ``ModuleNotFoundError`` naming the extra; ``torch_compat`` never imports it.
torchdata's multiprocessing iterator is a fork of torch's and keeps torch's bookkeeping under
torch's names, so ``torch_compat.IteratorBooks`` reads it as it
reads torch's; its hooks differ (``_reset`` primes the prefetch or not, ``_process_data``
takes the worker's state). ``tests/ecosystem/test_stateful.py`` fails when a torchdata release
moves one of these names.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

try:
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.incremental_state import (
        _DATASET_ITER_STATE,
        _DATASET_STATE,
        _FETCHER_STATE,
    )
    from torchdata.stateful_dataloader.stateful import Stateful
    from torchdata.stateful_dataloader.stateful_dataloader import (
        _SAMPLER_ITER_YIELDED,
    )
    from torchdata.stateful_dataloader.stateful_dataloader import (
        _StatefulMultiProcessingDataLoaderIter as StatefulMultiProcessingIter,
    )
except ModuleNotFoundError as missing:
    raise ModuleNotFoundError(
        "loaderdoctor.StatefulDataLoader needs torchdata: pip install 'loaderdoctor[torchdata]'",
        name=missing.name,
    ) from None

from loaderdoctor import torch_compat


class HookedStatefulIter(
    torch_compat.MultiProcessingHooks, StatefulMultiProcessingIter, ld_base=True
):
    """torchdata's multiprocessing iterator whose private hooks are loaderdoctor's ``ld_*``
    methods (see ``torch_compat.MultiProcessingHooks``); two take more than torch's:
    ``ld_reset(loader, first_iter=False, prime_prefetch=True)`` and
    ``ld_process_data(data, worker_id, state_dict)``; one is torchdata's alone:
    ``ld_restore_main_state(state_dict)``, where a resumed iterator takes its sampler's place."""

    LD_HOOKS = (("_restore_main_state", "ld_restore_main_state"),)  # type: ignore[assignment]
    ld_restore_main_state: Callable[..., None]

    @property
    def ld_sampler_yielded(self) -> int:
        """How many index batches this epoch's sampler iterator has given (torchdata counts)."""
        return int(self._sampler_iter_yielded)

    @property
    def ld_snapshot_yielded(self) -> int:
        """The sampler's count in the snapshot a ``state_dict()`` now would resume from."""
        main = self._snapshot.get(self._MAIN_SNAPSHOT) if self._snapshot else None
        return int(main[_SAMPLER_ITER_YIELDED]) if main else 0

    @property
    def ld_snapshot_step(self) -> int:
        """The step (batches yielded this epoch) of the snapshot a ``state_dict()`` resumes from."""
        return int(self._snapshot[self._SNAPSHOT_STEP]) if self._snapshot else 0

    @property
    def ld_num_yielded(self) -> int:
        """Batches yielded this epoch (torchdata's snapshots and ``state_dict`` count by it)."""
        return int(self._num_yielded)

    @ld_num_yielded.setter
    def ld_num_yielded(self, value: int) -> None:
        self._num_yielded = value

    @property
    def ld_sampler_iter(self) -> Any:
        return self._sampler_iter

    @ld_sampler_iter.setter
    def ld_sampler_iter(self, value: Any) -> None:
        self._sampler_iter = value

    @property
    def ld_finished(self) -> bool:
        """The epoch ended (torchdata's ``_finished``, recorded in its ``state_dict``)."""
        return bool(self._finished)

    @ld_finished.setter
    def ld_finished(self, value: bool) -> None:
        self._finished = value


def fast_forwards(state: Any) -> bool:
    """torchdata resumes an IterableDataset from ``state`` by re-reading every worker's stream
    from its start and dropping the batches yielded already (neither the dataset nor its
    iterator is Stateful), as its own ``__init__`` decides: by the first worker state it holds."""
    snapshot = state.get(StatefulMultiProcessingIter._SNAPSHOT, {})
    for worker_state in snapshot.get(StatefulMultiProcessingIter._WORKER_SNAPSHOTS, {}).values():
        if worker_state is None:
            continue
        fetcher = worker_state[_FETCHER_STATE] or {}
        return worker_state[_DATASET_STATE] is None and fetcher.get(_DATASET_ITER_STATE) is None
    return False


def without_dataset_states(state: Any) -> Any:
    """``state`` with every worker's dataset state (and its iterator's) left out, so that
    torchdata resumes the streams by re-reading them from their start (``fast_forwards``)."""
    snapshot = dict(state[StatefulMultiProcessingIter._SNAPSHOT])
    workers = {}
    for worker_id, worker_state in snapshot[StatefulMultiProcessingIter._WORKER_SNAPSHOTS].items():
        if worker_state is not None:
            fetcher = worker_state[_FETCHER_STATE]
            fetcher = None if fetcher is None else {**fetcher, _DATASET_ITER_STATE: None}
            worker_state = {**worker_state, _DATASET_STATE: None, _FETCHER_STATE: fetcher}
        workers[worker_id] = worker_state
    snapshot[StatefulMultiProcessingIter._WORKER_SNAPSHOTS] = workers
    return {**state, StatefulMultiProcessingIter._SNAPSHOT: snapshot}


# torchdata's warning when it resumes a stream by re-reading it from its start
_FAST_FORWARD_LOG = "Neither dataset nor iter(dataset) defines state_dict"


class _NoFastForwardNote(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_FAST_FORWARD_LOG)


@contextlib.contextmanager
def quiet_fast_forward() -> Iterator[None]:
    """Leave out torchdata's log warning that it re-reads a stream ("Neither dataset nor
    iter(dataset) defines state_dict ... naively fast-forwarding"): a pool that healing resumes
    is healing's to say, and for a dataset whose state healing left out the line is false."""
    logger = logging.getLogger(StatefulMultiProcessingIter.__module__)
    quiet = _NoFastForwardNote()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def count_fast_forward_once(iterator: Any, state: Any) -> None:
    """torchdata 0.11 counts the batches of a fast-forward twice: its ``__init__`` sets
    ``_num_yielded`` to the state's step, then yields that many batches again, each counted, so a
    ``state_dict()`` of the resumed iterator (and every snapshot taken during the fast-forward)
    is that many steps ahead, and a resume from it fails ("last_yielded_worker_id does not
    match"). A pool that loaderdoctor resumed after a death counts them once."""
    steps = int(state[iterator._SNAPSHOT][iterator._SNAPSHOT_STEP])
    if not steps or not fast_forwards(state) or iterator._num_yielded < 2 * steps:
        return
    iterator._num_yielded -= steps
    if iterator._snapshot[iterator._SNAPSHOT_STEP] > steps:  # taken during the fast-forward
        iterator._snapshot[iterator._SNAPSHOT_STEP] -= steps


class HookedStatefulLoader(torch_compat.LoaderHooks, ld_base=True):
    """A mixin before torchdata's ``StatefulDataLoader`` (or a subclass of it): its
    ``_get_iterator`` is ``ld_get_iterator``, whose default is the next class's own."""

    def ld_get_iterator(self) -> Any:
        return super()._get_iterator()  # type: ignore[misc]


__all__ = [
    "HookedStatefulIter",
    "HookedStatefulLoader",
    "Stateful",
    "StatefulDataLoader",
    "StatefulMultiProcessingIter",
    "count_fast_forward_once",
    "fast_forwards",
]
