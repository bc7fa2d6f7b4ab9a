"""Skipping bad records of a stream: thousands in a row are a loop, not a recursion."""

from __future__ import annotations

import warnings

import pytest
import torch

from loaderdoctor import DataLoader
from loaderdoctor.supervise.heal import HealWarning

BAD_IN_A_ROW = 2_500  # past Python's recursion limit of 1,000, as a corrupt shard can be


class _Records:
    """Records 0..2,999; reading each of the first 2,500 raises, as a corrupt record does."""

    def __init__(self) -> None:
        self.position = -1

    def __iter__(self) -> _Records:
        return self

    def __next__(self) -> int:
        self.position += 1
        if self.position >= 3_000:
            raise StopIteration
        if self.position < BAD_IN_A_ROW:
            raise ValueError(f"corrupt record {self.position}")
        return self.position


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self) -> _Records:
        return _Records()


def _delivered(num_workers: int) -> list[int]:
    loader = DataLoader(Stream(), batch_size=None, num_workers=num_workers, on_error="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one HealWarning per skipped record
        return [int(item) for item in loader]


def test_thousands_of_bad_records_in_a_row_are_skipped_in_process() -> None:
    assert _delivered(0) == list(range(BAD_IN_A_ROW, 3_000))


@pytest.mark.slow
def test_thousands_of_bad_records_in_a_row_are_skipped_in_a_worker() -> None:
    assert _delivered(1) == list(range(BAD_IN_A_ROW, 3_000))


# --- a generator that raises ----------------------------------------------

ITEMS = 80  # 0..79; worker w's share is i % workers == w


class Generated(torch.utils.data.IterableDataset):
    """A generator per worker; ``bad`` raises always (``flaky``: only on the first read)."""

    def __init__(self, bad: int, flaky: bool = False) -> None:
        self.bad, self.flaky = bad, flaky
        self.reads = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        self.reads += 1
        for i in range(worker, ITEMS, workers):
            if i == self.bad and (not self.flaky or self.reads == 1):
                raise ValueError(f"bad record {i}")
            yield i


def _skip_run(dataset: Generated, num_workers: int) -> tuple[list[int], DataLoader, list]:
    loader = DataLoader(dataset, batch_size=None, num_workers=num_workers, on_error="skip")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        items = [int(item) for item in loader]  # the user's line
    heal = [w for w in caught if issubclass(w.category, HealWarning)]
    return items, loader, heal


@pytest.mark.parametrize("num_workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_a_generator_that_raises_once_is_re_read_past_the_bad_item(num_workers: int) -> None:
    items, loader, heal = _skip_run(Generated(bad=23, flaky=True), num_workers)
    assert sorted(items) == [i for i in range(ITEMS) if i != 23]
    assert (loader.report.counts["samples"], loader.report.counts["skipped"]) == (79, 1)
    whose = "the" if num_workers == 0 else "worker 1's"
    position = 23 if num_workers == 0 else 11
    assert [str(w.message) for w in heal] == [
        f"loaderdoctor healed: A sample raised an exception in the Dataset [sample-error] -> skipped "
        f"(item #{position} of {whose} stream)"
    ]
    assert [w.filename for w in heal] == [__file__]


@pytest.mark.parametrize("num_workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_a_generator_that_raises_every_time_says_the_rest_of_its_stream_is_lost(
    num_workers: int,
) -> None:
    items, loader, heal = _skip_run(Generated(bad=23), num_workers)
    if num_workers == 0:
        expected, position, whose = list(range(23)), 23, "the"
    else:  # worker 0 delivers its 40; worker 1 stops at 23, its item #11
        expected, position, whose = (
            sorted([*range(0, ITEMS, 2), *range(1, 23, 2)]),
            11,
            "worker 1's",
        )
    assert sorted(items) == expected
    note = (
        f"a generator ends when it raises: the rest of this worker's stream after item "
        f"#{position} is lost (re-reading the stream raised there again); raise inside a loop "
        "that catches the error per item, or make __iter__ return an iterator object whose "
        "__next__ can go on"
    )
    assert [str(w.message) for w in heal] == [
        f"loaderdoctor healed: A sample raised an exception in the Dataset [sample-error] -> lost "
        f"(item #{position} of {whose} stream); {note}"
    ]
    assert note in loader.incidents[0].diagnosis.evidence
    assert [w.filename for w in heal] == [__file__]
    assert loader.report.status == "healed-with-loss"  # never plain "healed"


def test_thousands_of_skips_warn_ten_times_and_count_every_one() -> None:
    loader = DataLoader(Stream(), batch_size=None, num_workers=0, on_error="skip")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len([item for item in loader]) == 3_000 - BAD_IN_A_ROW
    assert len(caught) == 11
    assert str(caught[-1].message) == (
        "loaderdoctor healed: more than 10 samples skipped or replaced; the rest are not warned "
        "about one by one (loader.report counts every one)"
    )
    assert loader.report.counts["skipped"] == BAD_IN_A_ROW


class _MapWithBadSample(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> int:
        if index == 5:
            raise ValueError("corrupt sample 5")
        return index


@pytest.mark.parametrize("num_workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_a_skipped_map_style_sample_warns_at_the_users_line(num_workers: int) -> None:
    loader = DataLoader(
        _MapWithBadSample(), batch_size=4, num_workers=num_workers, on_error="skip", retries=0
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        items = [int(i) for batch in loader for i in batch]  # the user's line
    assert items == [i for i in range(12) if i != 5]
    heal = [w for w in caught if issubclass(w.category, HealWarning)]
    assert [str(w.message) for w in heal] == [
        "loaderdoctor healed: A sample raised an exception in the Dataset [sample-error] -> "
        "skipped (sample 5)"
    ]
    assert [w.filename for w in heal] == [__file__]


@pytest.mark.slow
def test_a_map_style_death_warns_at_the_users_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ld_datasets import Ledger

    loader = DataLoader(
        Ledger(12, {5: "kill-once"}, str(tmp_path)), batch_size=4, num_workers=2, heal=True
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        items = [int(i) for batch in loader for i in batch]  # the user's line
    assert sorted(items) == list(range(12))
    heal = [w for w in caught if issubclass(w.category, HealWarning)]
    assert heal and [w.filename for w in heal] == [__file__] * len(heal)
