"""Healing keeps exactly-once on the shapes real stacks use: ``drop_last=True``
(timm's train loader), a batch sampler of the user's, and a repeating sampler written the way
timm's ``MultiEpochsDataLoader`` writes it (the batch sampler wrapped in an endless sampler, the
loader iterated ``len(self)`` times per epoch). A bad sample's batch arrives short: its healthy
batch-mates once, never dropped with it, never replaced from the next epoch.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import loaderdoctor
from ld_datasets import Ledger
from loaderdoctor.supervise.heal import HealWarning

pytestmark = pytest.mark.slow

N = 32
BATCH = 8


class _RepeatSampler:
    """Repeats a sampler for ever (as timm's ``timm.data.loader._RepeatSampler``)."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield from iter(self.sampler)


class MultiEpochsDataLoader(loaderdoctor.DataLoader):
    """timm's loader shape: one iterator for the loader's life; an epoch is ``len(self)``
    batches taken from it (``timm.data.loader.MultiEpochsDataLoader``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._DataLoader__initialized = False
        if self.batch_sampler is None:
            self.sampler = _RepeatSampler(self.sampler)
        else:
            self.batch_sampler = _RepeatSampler(self.batch_sampler)
        self._DataLoader__initialized = True
        self.iterator = super().__iter__()

    def __len__(self) -> int:
        if self.batch_sampler is None:
            return len(self.sampler)
        return len(self.batch_sampler.sampler)

    def __iter__(self) -> Iterator[Any]:
        for _ in range(len(self)):
            yield next(self.iterator)


class Pairs(torch.utils.data.Sampler[list[int]]):
    """A batch sampler of the user's: shuffled batches of ``BATCH``, the tail left out."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.randperm(N, generator=self.generator).tolist()
        for start in range(0, N - N % BATCH, BATCH):
            yield order[start : start + BATCH]

    def __len__(self) -> int:
        return N // BATCH


def epochs_of(loader: Any, epochs: int) -> tuple[list[list[int]], list[int]]:
    """The samples of each epoch, and the size of every batch received."""
    sizes: list[int] = []
    seen: list[list[int]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        for _ in range(epochs):
            epoch: list[int] = []
            for batch in loader:
                sizes.append(len(batch))
                epoch.extend(int(v) for v in batch.flatten().tolist())
            seen.append(epoch)
    return seen, sizes


@pytest.fixture
def flag_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="shapes-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


SHAPES = ["drop_last", "batch_sampler", "repeating", "repeating_batch_sampler"]


def loader_of(shape: str, dataset: Ledger, **kwargs: Any) -> Any:
    generator = torch.Generator().manual_seed(7)
    if shape == "drop_last":
        return loaderdoctor.DataLoader(
            dataset, batch_size=BATCH, shuffle=True, drop_last=True, generator=generator, **kwargs
        )
    if shape == "batch_sampler":
        return loaderdoctor.DataLoader(dataset, batch_sampler=Pairs(generator), **kwargs)
    if shape == "repeating":
        return MultiEpochsDataLoader(
            dataset, batch_size=BATCH, shuffle=True, drop_last=True, generator=generator, **kwargs
        )
    return MultiEpochsDataLoader(dataset, batch_sampler=Pairs(generator), **kwargs)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fault", ["raise", "kill"])
def test_a_bad_sample_leaves_its_batch_short_and_every_healthy_sample_arrives_once(
    shape: str, fault: str, flag_dir: str
) -> None:
    """A sample that raises (skipped in the worker) or SIGKILLs its worker every time (the
    worker replaced, the sample quarantined): over three shuffled epochs each healthy sample
    arrives exactly once per epoch, the bad one never, and the counts say so."""
    loader = loader_of(shape, Ledger(N, {5: fault}, flag_dir), num_workers=2, heal=True)
    seen, sizes = epochs_of(loader, epochs=3)
    healthy = Counter(i for i in range(N) if i != 5)
    for epoch in seen:
        assert Counter(epoch) == healthy
    assert sorted(sizes) == [BATCH - 1] * 3 + [BATCH] * (3 * N // BATCH - 3)
    report = loader.report
    assert report.status == "healed"
    assert report.delivered == {"batches": 3 * N // BATCH, "samples": 3 * (N - 1)}
    assert report.counts["skipped"] == 3
    cause = {"raise": "sample-error", "kill": "killed-by-signal"}[fault]
    action = {"raise": "skipped", "kill": "quarantined"}[fault]
    assert [(i.diagnosis.cause, i.action, i.diagnosis.indices) for i in loader.incidents][:1] == [
        (cause, action, [5])
    ]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_quarantined_sample_leaves_its_batch_short_with_drop_last(
    num_workers: int, flag_dir: str, tmp_path: Any
) -> None:
    """A sample quarantined by an earlier run is left out in the main process (or the
    worker): its batch arrives short, its healthy batch-mates once."""
    from loaderdoctor.supervise.parent.quarantine import QuarantineEntry, write_quarantine

    quarantine = tmp_path / "q.json"
    write_quarantine(quarantine, {5: QuarantineEntry(5, "native-crash", [], None, "now")})
    loader = loader_of(
        "repeating",
        Ledger(N, {5: "kill"}, flag_dir),
        num_workers=num_workers,
        heal=True,
        quarantine=quarantine,
    )
    seen, _ = epochs_of(loader, epochs=2)
    for epoch in seen:
        assert Counter(epoch) == Counter(i for i in range(N) if i != 5)
    assert loader.report.delivered == {"batches": 2 * N // BATCH, "samples": 2 * (N - 1)}
    assert loader.report.counts["skipped"] == 2
