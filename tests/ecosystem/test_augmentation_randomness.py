"""Albumentations (real library code): an augmentation pipeline built in the dataset's
``__init__`` holds its own generators, which every worker inherits in the same state, so the
workers draw the same "random" augmentations (shown under stock torch as the control). The
supervised loader says so, once per pipeline; seeded per worker in ``worker_init_fn``, as the fix
says, the workers draw apart and nothing is said."""

from __future__ import annotations

import warnings
from typing import Any

import numpy
import pytest
import torch

import loaderdoctor
from loaderdoctor.supervise.detectors import DataWarning

A = pytest.importorskip("albumentations", reason="the eco extra installs albumentations")

pytestmark = [pytest.mark.slow, pytest.mark.ecosystem]


class Augmented(torch.utils.data.Dataset[torch.Tensor]):
    def __init__(self) -> None:
        self.transform = A.Compose([A.HorizontalFlip(p=0.5), A.RandomBrightnessContrast(p=0.5)])
        self.image = (numpy.arange(48, dtype=numpy.uint8) * 5).reshape(4, 4, 3)

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.from_numpy(self.transform(image=self.image)["image"].copy())


def seed_the_pipeline(worker_id: int) -> None:
    info = torch.utils.data.get_worker_info()
    assert info is not None
    info.dataset.transform.set_random_seed(info.seed % 2**32)


def first_batches(loader_class: Any, **kwargs: Any) -> tuple[list[warnings.WarningMessage], Any]:
    loader = loader_class(Augmented(), batch_size=4, num_workers=2, **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(loader)
    return caught, batches[:2]  # worker 0's first batch, then worker 1's


def test_workers_that_inherit_one_pipeline_draw_alike_and_it_is_said() -> None:
    _, (stock_0, stock_1) = first_batches(torch.utils.data.DataLoader)
    assert torch.equal(stock_0, stock_1)  # the control: the same augmentations in each worker
    caught, (ours_0, ours_1) = first_batches(loaderdoctor.DataLoader)
    assert torch.equal(ours_0, ours_1)
    said = [str(w.message) for w in caught if issubclass(w.category, DataWarning)]
    assert len(said) == 1, said
    assert said[0].startswith(
        "loaderdoctor: workers 0, 1 start with the same random state (Augmented's "
        "transform.random_generator, transform.py_random) [cloned-randomness]"
    )


def test_a_pipeline_seeded_per_worker_draws_apart_and_nothing_is_said() -> None:
    caught, (first, second) = first_batches(
        loaderdoctor.DataLoader, worker_init_fn=seed_the_pipeline
    )
    assert not torch.equal(first, second)
    assert not [w for w in caught if issubclass(w.category, DataWarning)]
