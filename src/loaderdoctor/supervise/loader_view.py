"""The loader as torch's iterators read it: the user's loader with its dataset wrapped."""

from __future__ import annotations

from typing import Any

from loaderdoctor import torch_compat
from loaderdoctor.supervise.heal_policy import HealPolicy
from loaderdoctor.supervise.worker import (
    SupervisedBatchedMapDataset,
    SupervisedIterableDataset,
    SupervisedMapDataset,
)


class _LoaderView:
    """The loader as torch's iterator reads it, with the dataset and callables wrapped."""

    def __init__(self, loader: Any, **overrides: Any) -> None:
        self._loader = loader
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def wrap_dataset(dataset: Any, dataset_kind: int, policy: HealPolicy | None = None) -> Any:
    if torch_compat.DATAPIPE_TYPES and isinstance(dataset, torch_compat.DATAPIPE_TYPES):
        return dataset  # DataPipes carry their own graph machinery: supervise deaths only
    if dataset_kind == torch_compat.DatasetKind.Iterable:
        return SupervisedIterableDataset(dataset, policy)
    if getattr(dataset, "__getitems__", None) and policy is None:
        return SupervisedBatchedMapDataset(dataset)
    return SupervisedMapDataset(dataset, policy)
