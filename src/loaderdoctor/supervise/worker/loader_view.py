"""The user's dataset as the workers see it: wrapped to record the sample in flight."""

from __future__ import annotations

from typing import Any

from loaderdoctor import torch_compat
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
