"""``loader.report``'s delivered counts: what ``loaderdoctor run`` reports, so they must be true.

A stream has no indices to count (torch hands its fetcher ``[None] * batch_size``): its batches
are counted by what they hold, so a short last batch and a skipped record count what arrived.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from loaderdoctor import DataLoader
from loaderdoctor.supervise.batch_count import samples_delivered


class Stream(torch.utils.data.IterableDataset):
    """Records 0..9."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        for record in range(10):
            yield torch.tensor([float(record)])


class Records(torch.utils.data.IterableDataset):
    """Records 0..9 whose record 3 raises on reading while the stream reads on (a decoder)."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        return _Reader()


class _Reader:
    def __init__(self) -> None:
        self.position = -1

    def __next__(self) -> torch.Tensor:
        self.position += 1
        if self.position >= 10:
            raise StopIteration
        if self.position == 3:
            raise ValueError("corrupt record 3")
        return torch.tensor([float(self.position)])


@pytest.mark.parametrize(
    ("indices", "batch", "samples"),
    [
        ([4, 5, 6, 7], torch.zeros(4, 1), 4),  # map-style: its indices
        ([4, 5, 6], torch.zeros(2, 1), 3),  # a sample skipped is taken off by its own event
        ([None] * 4, torch.zeros(2, 1), 2),  # a stream's short last batch
        ([None] * 4, [torch.zeros(3, 1), torch.zeros(3)], 3),
        (None, (torch.zeros(4, 3, 2, 2), torch.arange(4)), 4),  # a stream that batched itself
        (None, torch.zeros(4, 3), 1),  # one item of a stream
        (7, torch.zeros(3), 1),  # one sample of a map-style dataset, batch_size=None
    ],
)
def test_samples_delivered(indices: object, batch: object, samples: int) -> None:
    assert samples_delivered(indices, batch) == samples


def test_a_stream_batched_by_torch_counts_its_short_last_batch() -> None:
    loader = DataLoader(Stream(), batch_size=4)
    assert [len(batch) for batch in loader] == [4, 4, 2]
    assert loader.report.delivered == {"batches": 3, "samples": 10}


def test_a_skipped_record_of_a_stream_is_not_taken_off_twice() -> None:
    loader = DataLoader(Records(), batch_size=4, on_error="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        delivered = [batch.flatten().tolist() for batch in loader]
    assert delivered == [[0.0, 1.0, 2.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0]]
    assert loader.report.delivered == {"batches": 3, "samples": 9}
    assert loader.report.counts["skipped"] == 1


def test_a_map_style_skip_is_taken_off_its_batch() -> None:
    class BadAtFive(torch.utils.data.Dataset[torch.Tensor]):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, index: int) -> torch.Tensor:
            if index == 5:
                raise ValueError("sample 5 is corrupt")
            return torch.tensor([float(index)])

    loader = DataLoader(BadAtFive(), batch_size=4, on_error="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert [len(batch) for batch in loader] == [4, 3]
    assert loader.report.delivered == {"batches": 2, "samples": 7}
