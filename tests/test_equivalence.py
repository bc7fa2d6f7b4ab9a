"""A clean run of loaderdoctor.DataLoader is bit-identical to stock torch, same seed, same batches."""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import pytest
import torch

import loaderdoctor
from ld_datasets import (
    BatchedDataset,
    ConfiguredByInit,
    RandomAugmented,
    ShardedStream,
    pairs_batch_sampler,
    shard_by_worker,
)


def collect(loader_class: type, epochs: int = 1, **kwargs: Any) -> list[Any]:
    torch.manual_seed(1234)
    random.seed(1234)
    np.random.seed(1234)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_memory without an accelerator warns, identically
        seed = kwargs.pop("generator_seed", None)
        if seed is not None:  # a fresh generator per run: a shared one would be consumed
            kwargs["generator"] = torch.Generator().manual_seed(seed)
        loader = loader_class(**kwargs)
        return [batch for _ in range(epochs) for batch in loader]


def assert_identical(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_identical(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_identical(x, y)
    else:
        assert a == b


def check(epochs: int = 1, **kwargs: Any) -> None:
    stock = collect(torch.utils.data.DataLoader, epochs, **dict(kwargs))
    supervised = collect(loaderdoctor.DataLoader, epochs, **dict(kwargs))
    assert len(stock) > 0
    assert_identical(stock, supervised)


def test_is_a_torch_dataloader() -> None:
    loader = loaderdoctor.DataLoader(RandomAugmented())
    assert isinstance(loader, torch.utils.data.DataLoader)


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_map_style_shuffled(num_workers: int) -> None:
    check(dataset=RandomAugmented(), batch_size=4, shuffle=True, num_workers=num_workers)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_start_methods(method: str) -> None:
    check(
        dataset=RandomAugmented(),
        batch_size=5,
        shuffle=True,
        num_workers=2,
        multiprocessing_context=method,
    )


@pytest.mark.slow
# three workers shard unevenly under fork; under spawn two show the same pickled stream
@pytest.mark.parametrize(
    ("method", "workers"), [("fork", 3), pytest.param("spawn", 2, marks=pytest.mark.extended)]
)
def test_iterable_dataset(method: str, workers: int) -> None:
    check(
        dataset=ShardedStream(), batch_size=4, num_workers=workers, multiprocessing_context=method
    )


@pytest.mark.slow
def test_worker_init_fn_sees_the_users_dataset() -> None:
    check(dataset=ConfiguredByInit(), batch_size=2, num_workers=2, worker_init_fn=shard_by_worker)


@pytest.mark.slow
def test_explicit_generator_and_drop_last() -> None:
    check(
        dataset=RandomAugmented(),
        batch_size=4,
        shuffle=True,
        drop_last=True,
        num_workers=2,
        generator_seed=7,
    )


@pytest.mark.slow
def test_batch_size_none() -> None:
    check(dataset=RandomAugmented(9), batch_size=None, num_workers=2)


@pytest.mark.slow
def test_custom_batch_sampler_and_getitems() -> None:
    check(dataset=RandomAugmented(), batch_sampler=pairs_batch_sampler(37), num_workers=2)
    check(dataset=BatchedDataset(), batch_size=3, num_workers=2)


@pytest.mark.slow
def test_persistent_workers_over_epochs() -> None:
    check(
        epochs=3,
        dataset=RandomAugmented(),
        batch_size=4,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
    )


@pytest.mark.slow
def test_pin_memory_and_prefetch_factor() -> None:
    check(
        dataset=RandomAugmented(), batch_size=4, num_workers=2, pin_memory=True, prefetch_factor=4
    )
