"""The worker context is passed to the wrappers, not kept in a module.

Each worker (each in-process iterator) has its own ``WorkerContext``; its skip/replace events
travel with the batch they belong to, or alone when no batch follows; two loaders of one process
never read what the other learned.
"""

from __future__ import annotations

import copy
import gc
import json
import pickle
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import IterableDataset, default_collate

import loaderdoctor
from loaderdoctor.recorder import FlightRecorder
from loaderdoctor.supervise.heal import HealWarning
from loaderdoctor.supervise.worker.collate import SupervisedCollate
from loaderdoctor.supervise.worker.context import EventOutbox, Loading, WorkerContext
from loaderdoctor.supervise.worker.datasets import SupervisedIterableDataset, SupervisedMapDataset
from loaderdoctor.supervise.worker.loader_view import attach_context
from loaderdoctor.supervise.worker.sample_policy import HealedBatch, SamplePolicy

SKIP = SamplePolicy("skip", 0, frozenset(), drop_last=False, dataset_len=6)


class RaisesAt:
    """Samples 0..5; ``bad`` raises."""

    def __init__(self, bad: int) -> None:
        self.bad = bad

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == self.bad:
            raise ValueError(f"sample {index} is corrupt")
        return torch.tensor([index])


def test_a_new_context_has_learned_nothing_and_shares_nothing() -> None:
    first, second = WorkerContext(0), WorkerContext(1)
    first.loading.bad(3)
    first.loading.collated_like(("Tensor", (2,), "torch.float32"))
    first.loading.add(7)
    first.loading.loaded(7)
    first.outbox.record({"index": 3})
    learned = second.loading
    assert (learned.known_bad, learned.good_structure, learned.indices) == (set(), None, [])
    assert (learned.last_loaded, learned.stream, learned.take_resume()) == (None, None, None)
    assert (second.outbox.batch, second.outbox.kept) == ([], [])
    assert (second.slot, second.stack_log) == (None, None)
    assert second.outbox.worker_id == 1


@pytest.mark.parametrize("field", ["worker_id", "slot", "outbox", "quarantine", "stack_log"])
def test_a_workers_identity_cannot_change_after_its_start(field: str) -> None:
    # As torch's WorkerInfo: the wrappers read who their worker is; only what it is loading
    # changes, in one object.
    context = WorkerContext(0)
    was = getattr(context, field)
    with pytest.raises(AttributeError, match="fixed for its life"):
        setattr(context, field, None)
    with pytest.raises(AttributeError, match="fixed for its life"):
        delattr(context, field)
    with pytest.raises(AttributeError, match="fixed for its life"):
        context.loading = Loading()
    assert getattr(context, field) is was


def test_a_batch_in_hand_is_taken_once_by_its_collate() -> None:
    loading = WorkerContext(0).loading
    loading.begin([4, 5])
    loading.add(6)
    assert loading.take() == [4, 5, 6]
    assert loading.take() == []  # the next batch starts with none
    loading.add(9)
    loading.failed()
    assert loading.take() == []  # a batch that raised goes on to no collate
    loading.collated_like("first")
    loading.collated_like("second")
    assert loading.good_structure == "first"  # the first structure learnt stands


def test_a_restarted_stream_resumes_once() -> None:
    resume = object()
    context = WorkerContext(0, stream_resume=resume)
    assert context.loading.take_resume() is resume
    assert context.loading.take_resume() is None  # its first epoch only


def test_a_placeholder_context_crosses_to_a_spawned_worker_whole() -> None:
    wrapper = SupervisedMapDataset(RaisesAt(2), SKIP)
    copied = pickle.loads(pickle.dumps(wrapper))
    assert isinstance(copied.context, WorkerContext) and copied.context.worker_id is None
    assert copied.context.loading.indices == []
    assert copy.deepcopy(WorkerContext(3)).worker_id == 3


def test_each_wrapper_starts_unattached_and_attach_gives_both_one_context() -> None:
    dataset = SupervisedMapDataset(RaisesAt(2), SKIP)
    collate = SupervisedCollate(default_collate, heal=True)
    assert dataset.context is not collate.context  # placeholders until a worker starts
    context = WorkerContext(0)
    attach_context(context, dataset, collate)
    assert dataset.context is context and collate.context is context
    assert collate.reference_votes == dataset.reference_votes  # the healing dataset's own
    raising = SupervisedMapDataset(RaisesAt(2), None)
    attach_context(WorkerContext(0), raising, collate)
    assert collate.reference_votes is None  # no policy: nothing to vote with


def test_events_travel_with_the_batch_they_belong_to() -> None:
    dataset = SupervisedMapDataset(RaisesAt(2), SKIP)
    collate = SupervisedCollate(default_collate, heal=True)
    context = WorkerContext(1)
    attach_context(context, dataset, collate)
    batch = collate(dataset.__getitems__([1, 2, 3]))
    assert isinstance(batch, HealedBatch)
    assert batch.batch.tolist() == [[1], [3]]
    assert batch.samples == 2
    [event] = batch.events
    assert (event["index"], event["action"], event["worker"], event["message"]) == (
        2,
        "skipped",
        1,
        "ValueError: sample 2 is corrupt",
    )
    assert context.outbox.batch == []  # taken: the next batch starts with none
    clean = collate(dataset.__getitems__([4, 5]))
    assert isinstance(clean, torch.Tensor) and clean.tolist() == [[4], [5]]


def test_flush_writes_the_pending_events_alone(tmp_path: Path) -> None:
    recorder = FlightRecorder(1)
    slot = recorder.attach(0)
    with open(tmp_path / "events.jsonl", "w") as log:
        outbox = EventOutbox(0, log, slot)
        outbox.record({"position": 4, "action": "skipped"})
        outbox.record({"position": 5, "action": "skipped"})
        outbox.flush()
        assert outbox.batch == [] and outbox.kept == []
        outbox.flush()  # nothing pending: nothing written
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"position": 4, "action": "skipped", "worker": 0},
        {"position": 5, "action": "skipped", "worker": 0},
    ]
    assert recorder.snapshot(0).events == 2  # the parent reads the file when this grows


def test_flush_in_process_hands_the_events_to_the_list_the_parent_reads() -> None:
    kept: list[dict[str, Any]] = []
    context = WorkerContext.in_process(kept)
    context.outbox.record({"position": 0, "action": "skipped"})
    context.outbox.flush()
    assert kept == [{"position": 0, "action": "skipped", "worker": None}]
    assert context.outbox.batch == []


def test_two_in_process_loaders_never_read_what_the_other_learned() -> None:
    # On main both shared one module-level state: the structure loader b learned from its
    # batch (2 values a sample) was taken by loader a as the good one, so a skipped its three
    # healthy samples of 3 values and kept the ragged one.
    b = loaderdoctor.DataLoader([torch.zeros(2) for _ in range(4)], batch_size=2, heal=True)
    data = [torch.full((3,), float(i)) for i in range(8)]
    data[1] = torch.zeros(2)  # ragged: it cannot be stacked with the others
    a = loaderdoctor.DataLoader(data, batch_size=4, heal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        pairs = list(zip(b, a, strict=True))
    assert [batch[:, 0].tolist() for _, batch in pairs] == [[0.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    assert [(i.diagnosis.cause, i.diagnosis.indices, i.action) for i in a.report.incidents] == [
        ("collate-error", [1], "skipped")
    ]
    assert b.report.incidents == []


class Counting(IterableDataset[int]):
    def __init__(self) -> None:
        self.iterators: list[weakref.ref[Any]] = []

    def __iter__(self) -> Iterator[int]:
        iterator = iter(range(100))
        generator = (i for i in iterator)
        self.iterators.append(weakref.ref(generator))
        return generator


def test_a_dropped_in_process_stream_is_freed_without_the_garbage_collector() -> None:
    dataset = Counting()
    loader = loaderdoctor.DataLoader(dataset, batch_size=4)
    was = gc.isenabled()
    gc.disable()
    try:
        iterator = iter(loader)
        assert next(iterator).tolist() == [0, 1, 2, 3]
        [stream] = dataset.iterators
        assert stream() is not None
        del iterator
        # No cycle holds the user's stream (the stream's wrapper holds the context's outbox,
        # not the context that holds the stream), and no module keeps it.
        assert stream() is None
    finally:
        if was:
            gc.enable()


def test_an_iterable_wrapper_gives_its_stream_the_workers_facts_not_the_context() -> None:
    wrapper = SupervisedIterableDataset(range(3))
    context = WorkerContext(2)
    attach_context(context, wrapper, None)
    stream = iter(wrapper)
    assert context.loading.stream is stream
    assert (stream.worker_id, stream.slot, stream.outbox) == (2, None, context.outbox)
    assert not any(value is context for value in vars(stream).values())
