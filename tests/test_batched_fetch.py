"""A dataset that loads a whole batch with its own ``__getitems__`` (Hugging Face
``datasets.Dataset``, any batched fetch): a worker death inside it names the sample that
killed it, found by re-trying the batch's samples alone, or says honestly that it was one of
the batch, never the batch's first index."""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator

import pytest

import loaderdoctor
from ld_datasets import BatchFetched
from loaderdoctor.supervise.errors import WorkerDiedError
from loaderdoctor.supervise.heal import HealWarning

pytestmark = pytest.mark.slow

N = 120
ORDER = [111, 37, *[i for i in range(N) if i not in (111, 37)]]  # 37 is no batch's first
IN_FLIGHT = "the dataset's own __getitems__ loads a batch at once, so the sample in flight was "
FIRST_BATCH = "one of [111, 37, 0, 1, 2, 3, 4, 5]"


@pytest.fixture
def flag_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="batched-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_crash_inside_getitems_names_the_sample_that_crashed(flag_dir: str) -> None:
    loader = loaderdoctor.DataLoader(
        BatchFetched(N, {37: "segv"}, flag_dir), batch_size=8, sampler=ORDER, num_workers=2
    )
    with pytest.raises(WorkerDiedError) as caught:
        for _ in loader:
            pass
    diagnosis = caught.value.diagnosis
    assert (diagnosis.cause, diagnosis.indices) == ("native-crash", [37])
    assert (
        f"{IN_FLIGHT}{FIRST_BATCH}; re-tried one by one in a fresh worker, sample 37 killed it "
        "again"
    ) in diagnosis.evidence
    assert [(i.diagnosis.indices, i.action) for i in loader.incidents] == [([37], "raised")]


def test_a_kill_inside_getitems_that_does_not_come_back_names_no_sample(flag_dir: str) -> None:
    loader = loaderdoctor.DataLoader(
        BatchFetched(N, {37: "kill-once"}, flag_dir), batch_size=8, sampler=ORDER, num_workers=2
    )
    with pytest.raises(WorkerDiedError) as caught:
        for _ in loader:
            pass
    diagnosis = caught.value.diagnosis
    assert (diagnosis.cause, diagnosis.indices) == ("killed-by-signal", [])
    assert f"{IN_FLIGHT}{FIRST_BATCH}; each loaded fine alone in a fresh worker" in (
        diagnosis.evidence
    )


@pytest.mark.parametrize("fault", ["segv", "kill"])
def test_healing_a_crash_inside_getitems_delivers_the_batch_s_healthy_samples_once(
    fault: str, flag_dir: str
) -> None:
    """heal=True with on_error="raise" keeps the dataset's own __getitems__ (nothing to skip
    in-process); the culprit is found alone, quarantined, and its batch-mates arrive once, in
    this epoch and the next."""
    loader = loaderdoctor.DataLoader(
        BatchFetched(N, {37: fault}, flag_dir),
        batch_size=8,
        sampler=ORDER,
        num_workers=2,
        heal=True,
        on_error="raise",
        persistent_workers=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        epochs = [[row for batch in loader for row in batch["index"].tolist()] for _ in range(2)]
    for epoch in epochs:
        assert Counter(epoch) == Counter(i for i in range(N) if i != 37)
    cause = {"segv": "native-crash", "kill": "killed-by-signal"}[fault]
    assert [(i.diagnosis.cause, i.action, i.diagnosis.indices) for i in loader.incidents] == [
        (cause, "quarantined", [37])
    ]
    report = loader.report
    assert report.quarantine == [37]
    assert report.delivered == {"batches": 2 * N // 8, "samples": 2 * (N - 1)}
    assert report.counts["skipped"] == 2
