"""Skipping bad records of a stream: thousands in a row are a loop, not a recursion (issue 16)."""

from __future__ import annotations

import warnings

import pytest
import torch

from loaderdoctor import DataLoader

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
