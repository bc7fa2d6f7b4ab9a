"""Live workers learn a new quarantine before they fetch.

A sample that kills its worker, and again when it is re-tried alone, is quarantined. The batches
already prefetched to the other, live workers were sent before that: a live worker that fetched
the sample (a duplicate drawn by a sampler with replacement, or a substitute's candidate under
``on_error="replace"``) died of it a second time. Here the live worker's batch holding the
second read waits until the quarantine file names the sample, so the second read comes after the
quarantine whatever the load: before, it killed the worker again (two incidents for one sample);
now the worker knows, and the sample is skipped (or replaced) like any quarantined one.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset, get_worker_info

import loaderdoctor
from ld_datasets import quiet_result_queue
from loaderdoctor.supervise.heal import HealWarning
from loaderdoctor.supervise.live_quarantine import NO_LIVE_QUARANTINE, LiveQuarantine

N = 24
BAD = 9  # kills its worker, every time
RAISES = 8  # raises ValueError (on_error="replace": its substitute's first candidate is BAD)
GATE = 12  # waits, in a worker, until the quarantine file names BAD
CAUSES = {"sigkill": "killed-by-signal", "segv": "native-crash"}
GATE_WAIT_S = 120.0  # bounded: a broken run fails, it does not hang


class Gated(Dataset):
    """Returns ``tensor([index])``. ``BAD`` kills its worker the way ``fault`` says; ``GATE``
    waits until ``quarantine`` names ``BAD``; ``raises`` raise ValueError."""

    def __init__(self, fault: str, quarantine: str, raises: tuple[int, ...] = ()) -> None:
        self.fault, self.quarantine, self.raises = fault, quarantine, raises

    def __len__(self) -> int:
        return N

    def __getitem__(self, index: int) -> torch.Tensor:
        in_worker = get_worker_info() is not None
        if index == BAD and in_worker:
            quiet_result_queue()
            if self.fault == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            ctypes.string_at(0)
        if index == GATE and in_worker:
            deadline = time.monotonic() + GATE_WAIT_S
            while BAD not in quarantined(self.quarantine) and time.monotonic() < deadline:
                time.sleep(0.01)
        if index in self.raises:
            raise ValueError(f"bad sample {index}")
        return torch.tensor([index])


class GatedBatched(Gated):
    """``Gated`` that loads a whole batch with its own ``__getitems__`` (as Hugging Face
    ``datasets`` does): its live workers leave the quarantined samples out before the call."""

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        return [self[index] for index in indices]


def quarantined(path: str) -> list[int]:
    try:
        with open(path, encoding="utf-8") as handle:
            return [entry["index"] for entry in json.load(handle)["quarantine"]]
    except (OSError, ValueError):
        return []


# Batches of 4, two workers, prefetch 2: torch sends tasks 0-3 at the start, round robin, so
# worker 0 holds batches 0 and 2 and worker 1 holds batches 1 and 3 before anything loads.
# Worker 0 dies at BAD in batch 0; worker 1 waits at GATE in batch 1 until BAD is quarantined,
# then reaches batch 3, sent before the quarantine, with its second read of BAD.
BATCHES = [
    [0, 1, BAD, 2],  # worker 0: dies here
    [GATE, 3, 4, 5],  # worker 1: waits for the quarantine
    [6, 7, 10, 11],  # worker 0 (owed: re-sent to its replacement)
    [13, BAD, 14, 15],  # worker 1: prefetched before the quarantine, a duplicate of BAD
    [16, 17, 18, 19],
    [20, 21, 22, 23],
]
REPLACE_BATCHES = [
    *BATCHES[:3],
    # worker 1: RAISES' substitute search passes BAD on its way; then BAD's duplicate
    [RAISES, BAD, 14, 15],
    *BATCHES[4:],
]


def run(loader: loaderdoctor.DataLoader) -> Counter[int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        return Counter(int(row[0]) for batch in loader for row in batch)


def loader_for(
    fault: str,
    tmp_path: Path,
    on_error: str,
    batches: list[list[int]],
    dataset: type[Gated] = Gated,
    **kwargs: Any,
) -> loaderdoctor.DataLoader:
    path = str(tmp_path / "quarantine.json")
    raises = (RAISES,) if batches is REPLACE_BATCHES else ()
    return loaderdoctor.DataLoader(
        dataset(fault, path, raises),
        batch_size=4,
        sampler=[index for batch in batches for index in batch],
        num_workers=2,
        prefetch_factor=2,
        heal=True,
        on_error=on_error,
        quarantine=path,
        **kwargs,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("on_error", "fault", "method", "dataset"),
    [
        ("skip", "sigkill", None, Gated),
        ("skip", "segv", None, Gated),
        ("raise", "sigkill", None, Gated),
        ("raise", "segv", None, GatedBatched),
        ("skip", "sigkill", "spawn", Gated),
    ],
)
def test_a_live_worker_skips_a_duplicate_quarantined_after_it_was_sent(
    on_error: str, fault: str, method: str | None, dataset: type[Gated], tmp_path: Path
) -> None:
    loader = loader_for(fault, tmp_path, on_error, BATCHES, dataset, multiprocessing_context=method)
    received = run(loader)
    healthy = [i for batch in BATCHES for i in batch if i != BAD]
    assert received == Counter(healthy)  # every healthy sample exactly once, BAD never
    assert [(i.diagnosis.cause, i.action, i.diagnosis.indices) for i in loader.incidents] == [
        (CAUSES[fault], "quarantined", [BAD])
    ]
    report = loader.report
    assert report.quarantine == [BAD]
    # both reads of BAD are skipped: the one the dead worker held, the one a live worker held
    assert (report.counts["samples"], report.counts["skipped"]) == (len(healthy), 2)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["sigkill", "segv"])
def test_with_replace_a_live_worker_substitutes_a_sample_quarantined_after_it_was_sent(
    fault: str, tmp_path: Path
) -> None:
    """The duplicate of BAD is replaced, and RAISES' substitute search passes BAD by: before,
    the live worker fetched BAD as RAISES' substitute and died of it a second time."""
    loader = loader_for(fault, tmp_path, "replace", REPLACE_BATCHES)
    received = run(loader)
    substitute = BAD + 1  # the first healthy sample after BAD (and after RAISES, past BAD)
    expected = Counter(i for batch in REPLACE_BATCHES for i in batch if i not in (BAD, RAISES))
    expected[substitute] += 3  # stands in for BAD (batches 0 and 3) and for RAISES
    assert received == expected
    assert [(i.diagnosis.cause, i.action, i.diagnosis.indices) for i in loader.incidents] == [
        (CAUSES[fault], "quarantined", [BAD]),
        ("sample-error", "replaced", [RAISES]),
    ]
    assert loader.report.quarantine == [RAISES, BAD]
    counts = loader.report.counts
    assert (counts["samples"], counts["skipped"], counts["replaced"]) == (N, 0, 3)


def test_a_reader_learns_each_entry_the_main_process_adds() -> None:
    live = LiveQuarantine(capacity=3)
    reader = live.reader()
    assert not reader.grown() and 5 not in reader
    assert live.add(5)
    assert reader.grown() and 5 in reader and 6 not in reader
    assert [live.add(index) for index in (0, True, -1, "7", 2**63 - 1, 7, 8)] == [
        True,  # index 0 is a sample like any other
        False,  # not an index (a bool, a negative, a string, past what an int64 holds)
        False,
        False,
        False,
        True,
        False,  # the table is full: the main process still leaves it out of what it sends
    ]
    assert [index in reader for index in (0, 5, 7, 8)] == [True, True, True, False]
    assert [1, 2] not in reader  # an index that cannot be hashed is never quarantined
    assert 5 not in NO_LIVE_QUARANTINE and not NO_LIVE_QUARANTINE.grown()
