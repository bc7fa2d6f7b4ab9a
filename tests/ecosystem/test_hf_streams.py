"""Hugging Face datasets' ``IterableDataset`` (real library code) under the supervised loaders,
with a worker killed mid-epoch and healing on: every item arrives exactly once in each epoch.

Its own ``state_dict()`` does not resume it exactly (no shuffle buffer saved; a loaded state
re-applied at later epochs of the same number; in a worker sharing a shuffled stream, an
IndexError loading it), so a re-started worker re-reads its stream instead; and its example
generators, alike in every worker at their start by design, are not reported as cloned.
"""

from __future__ import annotations

import os
import signal
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import loaderdoctor
from ld_datasets import quiet_result_queue
from loaderdoctor.supervise.heal import HealWarning

datasets = pytest.importorskip("datasets", reason="the eco extra installs datasets")

pytestmark = [pytest.mark.slow, pytest.mark.ecosystem]
ITEMS, BATCH, CULPRIT = 96, 4, 30


class KillOnce:
    """A ``.map()`` function that SIGKILLs its worker the first time it meets ``CULPRIT``."""

    def __init__(self, flag: Path) -> None:
        self.flag = flag

    def __call__(self, example: dict[str, Any]) -> dict[str, Any]:
        if example["x"] == CULPRIT and not self.flag.exists():
            self.flag.touch()
            quiet_result_queue()
            os.kill(os.getpid(), signal.SIGKILL)
        return example


def stream(flag: Path, shuffled: bool) -> Any:
    table = datasets.Dataset.from_dict({"x": list(range(ITEMS))})
    data = table.to_iterable_dataset(num_shards=4).map(KillOnce(flag))
    if shuffled:
        data = data.shuffle(seed=3, buffer_size=16)
    return data.with_format("torch")


@pytest.mark.parametrize("loader_class", ["DataLoader", "StatefulDataLoader"])
@pytest.mark.parametrize(
    ("shuffled", "workers", "persistent"),
    [(True, 1, False), (True, 2, False), (False, 2, True), (True, 2, True)],
    ids=["shuffled-1", "shuffled-2", "persistent", "shuffled-persistent"],
)
def test_a_worker_killed_mid_epoch_loses_and_repeats_no_item(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    loader_class: str,
    shuffled: bool,
    workers: int,
    persistent: bool,
) -> None:
    if loader_class == "StatefulDataLoader":
        pytest.importorskip("torchdata", reason="the eco extra installs torchdata")
    loader = getattr(loaderdoctor, loader_class)(
        stream(tmp_path / "killed", shuffled),
        batch_size=BATCH,
        num_workers=workers,
        persistent_workers=persistent,
        heal=True,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # no set_epoch(): a loaded state of epoch 0 would apply again in the next one
        epochs = [[int(i) for batch in loader for i in batch["x"]] for _ in range(2)]
    assert (tmp_path / "killed").exists()
    assert [Counter(epoch) for epoch in epochs] == [Counter(range(ITEMS))] * 2
    assert [i.action for i in loader.incidents] == ["respawned"]
    assert loader.report.status == "healed"
    said = [str(w.message) for w in caught if not issubclass(w.category, HealWarning)]
    assert not [text for text in said if "cloned-randomness" in text or "same random" in text]
    # torchdata's "Neither dataset nor iter(dataset) defines state_dict": healing's re-read
    assert not [r for r in caplog.records if "fast-forwarding" in r.getMessage()]


def test_its_generators_are_left_to_it_and_a_subclass_own_are_compared(tmp_path: Path) -> None:
    import numpy

    from loaderdoctor.supervise.worker.rng_states import dataset_generators

    shuffled = stream(tmp_path / "unused", shuffled=True)
    assert dataset_generators(shuffled) == {}

    class Augmented(type(shuffled)):  # type: ignore[misc]
        pass

    augmented = shuffled.__class__.__new__(Augmented)
    augmented.__dict__.update(shuffled.__dict__, rng=numpy.random.default_rng(0))
    assert list(dataset_generators(augmented)) == ["self.rng"]
