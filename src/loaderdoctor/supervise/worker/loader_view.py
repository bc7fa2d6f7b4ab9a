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


def wrap_dataset(dataset: Any, dataset_kind: int, policy: SamplePolicy | None = None) -> Any:
    if torch_compat.DATAPIPE_TYPES and isinstance(dataset, torch_compat.DATAPIPE_TYPES):
        return dataset  # DataPipes carry their own graph machinery: supervise deaths only
    if dataset_kind == torch_compat.DatasetKind.Iterable:
        return SupervisedIterableDataset(dataset, policy)
    if getattr(dataset, "__getitems__", None) and policy is None:
        return SupervisedBatchedMapDataset(dataset)
    return SupervisedMapDataset(dataset, policy)


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
