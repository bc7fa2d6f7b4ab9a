"""The user's dataset as the workers see it: wrapped to record the sample in flight; and how one
worker's wrappers get its context."""

from __future__ import annotations

from typing import Any

from loaderdoctor import torch_compat
from loaderdoctor.supervise.worker.collate import SupervisedCollate
from loaderdoctor.supervise.worker.context import WorkerContext
from loaderdoctor.supervise.worker.datasets import (
    SupervisedBatchedMapDataset,
    SupervisedIterableDataset,
    SupervisedMapDataset,
)
from loaderdoctor.supervise.worker.sample_policy import SamplePolicy


class _ForwardsState:
    """A wrapper of a dataset that has its own ``state_dict``: torchdata's worker saves and
    restores the dataset's state through the wrapper, unchanged (torch's never asks)."""

    dataset: Any

    def state_dict(self) -> Any:
        return self.dataset.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.dataset.load_state_dict(state)


class StatefulMapDataset(_ForwardsState, SupervisedMapDataset):
    pass


class StatefulBatchedMapDataset(_ForwardsState, SupervisedBatchedMapDataset):
    pass


def has_own_state(dataset: Any) -> bool:
    """The dataset keeps a state (torchdata's ``Stateful`` protocol, checked the same way)."""
    return callable(getattr(dataset, "state_dict", None)) and callable(
        getattr(dataset, "load_state_dict", None)
    )


def wrap_dataset(dataset: Any, dataset_kind: int, policy: SamplePolicy | None = None) -> Any:
    if torch_compat.DATAPIPE_TYPES and isinstance(dataset, torch_compat.DATAPIPE_TYPES):
        return dataset  # DataPipes carry their own graph machinery: supervise deaths only
    if dataset_kind == torch_compat.DatasetKind.Iterable:
        return SupervisedIterableDataset(dataset, policy)
    stateful = has_own_state(dataset)
    if getattr(dataset, "__getitems__", None) and policy is None:
        return (StatefulBatchedMapDataset if stateful else SupervisedBatchedMapDataset)(dataset)
    return (StatefulMapDataset if stateful else SupervisedMapDataset)(dataset, policy)


def attach_context(context: WorkerContext, dataset: Any, collate: Any) -> None:
    """Give ``context`` to the wrappers one worker (or one in-process iterator) loads with: the
    dataset torch hands it and the collate_fn. A healing map-style dataset's reference votes go
    to the collate wrapper too (it asks for them when a batch's first failure leaves it without
    a structure known to be good)."""
    if isinstance(dataset, (SupervisedMapDataset, SupervisedIterableDataset)):
        dataset.context = context
    if isinstance(collate, SupervisedCollate):
        collate.context = context
        policy = getattr(dataset, "policy", None)
        heals = policy is not None and policy.on_error != "raise"
        collate.reference_votes = (
            dataset.reference_votes if heals and isinstance(dataset, SupervisedMapDataset) else None
        )
