"""Recovery alone: what it does about a failed worker, with a fake pool and fake torch books.

No process starts here: the pool, torch's bookkeeping, the probe and the successor are fakes that
record what Recovery asked of them, so each decision is checked as a value (Resumed, HandOver,
Raise) and as the exact changes to the books.
"""

from __future__ import annotations

import functools
import gc
import tempfile
import warnings
import weakref
from typing import Any

import pytest
from torch.utils.data import DataLoader

from loaderdoctor import torch_compat
from loaderdoctor.forensics import Evidence
from loaderdoctor.recorder import FlightRecorder
from loaderdoctor.supervise.errors import WorkerDiedError
from loaderdoctor.supervise.heal import HealWarning
from loaderdoctor.supervise.live_quarantine import LiveQuarantine
from loaderdoctor.supervise.parent import repair
from loaderdoctor.supervise.parent.collect import EventReader
from loaderdoctor.supervise.parent.controls import ProbeFailure
from loaderdoctor.supervise.parent.ledger import Ledger
from loaderdoctor.supervise.parent.recovery import (
    TABLE_FULL_NOTE,
    HandOver,
    Raise,
    Recovery,
    Resumed,
    Successor,
)
from loaderdoctor.supervise.parent.repair import PoolParts
from loaderdoctor.supervise.parent.supervision import LoaderSnapshot, Settings, Supervision
from loaderdoctor.supervise.parent.watch import PoolFailure


class FakeBooks:
    """torch's books of a 2-worker pool: tasks 0..3 sent, worker 0 owes 0 and 2, worker 1 owes 1
    and has delivered 3 ahead of its turn."""

    def __init__(self) -> None:
        self.num_workers = 2
        self.prefetch_factor = 2
        self.pin_memory = False
        self.drop_last = False
        self.worker_init_fn = None
        self.sampler_iter = iter([[8, 9], [10, 11]])
        self.index_sampler = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
        self.task_info: dict[int, tuple[Any, ...]] = {0: (0,), 1: (1,), 2: (0,), 3: (1, "b3")}
        self.workers_status = [False, True]
        self.num_tasks = [2, 2]
        self.shut = 0
        self.settled = 0

    def owed_by(self, worker_id: int) -> list[int]:
        return sorted(t for t, i in self.task_info.items() if i[0] == worker_id and len(i) == 1)

    def buffered(self) -> list[tuple[int, Any]]:
        return [(i[0], i[1]) for i in self.task_info.values() if len(i) == 2]

    def received(self, task: int, worker_id: int, data: Any) -> None:
        self.task_info[task] = (worker_id, data)

    def worker_alive(self, worker_id: int) -> None:
        self.workers_status[worker_id] = True

    def recount_tasks(self, worker_id: int) -> None:
        self.num_tasks[worker_id] = sum(1 for i in self.task_info.values() if i[0] == worker_id)

    def result_queue_writer_lock(self) -> None:
        return None

    def take_ready_results(self, limit: int) -> str:
        self.settled += 1
        return ""

    def worker_loop_args(self, worker_id: int, index_queue: Any, **kwargs: Any) -> tuple[Any, ...]:
        return (worker_id, index_queue, kwargs)

    def shut_down(self) -> None:
        self.shut += 1


class FakePool:
    def __init__(self) -> None:
        self.queues: dict[int, list[Any]] = {0: [], 1: []}
        self.respawned: list[int] = []
        self.stopped = 0

    def is_alive(self, worker_id: int) -> bool:
        return worker_id == 1

    def respawn(self, worker_id: int, context: Any, args: Any) -> tuple[int, int]:
        self.respawned.append(worker_id)
        self.queues[worker_id] = []
        args(self.queues[worker_id])  # the arguments are built for the new queue
        return 100 + worker_id, 200 + worker_id

    def index_queue(self, worker_id: int) -> Any:
        queue = self.queues[worker_id]

        class _Put:
            def put(self, item: Any) -> None:
                queue.append(item)

        return _Put()

    def stop(self, busy: list[bool]) -> None:
        self.stopped += 1


def _setup(
    heal: bool = True, probe_finds: Any = None
) -> tuple[Recovery, FakeBooks, FakePool, Supervision, list[Any]]:
    loader = DataLoader(list(range(12)), batch_size=2, num_workers=2)
    settings = Settings(
        hang_timeout=None,
        heal=heal,
        on_error="raise",
        retries=0,
        quarantine_path=None,
        allow_in_process=False,
    )
    sup = Supervision.of(loader, settings)
    sup.log.quiet = True
    ledger = Ledger()
    for task, indices in {0: [0, 1], 1: [2, 3], 2: [4, 5], 3: [6, 7]}.items():
        ledger.owe(task, indices)
    books, pool = FakeBooks(), FakePool()
    probed: list[Any] = []

    def probe(snapshot: LoaderSnapshot, indices: list[Any], collate: bool = False) -> Any:
        probed.append(list(indices))
        # a failure found follows its sample: the control (another sample) loads fine
        if not isinstance(probe_finds, int):
            return probe_finds
        return ProbeFailure(probe_finds, "killed-by-signal") if probe_finds in indices else None

    parts = PoolParts(
        sup,
        LoaderSnapshot(loader),
        books,  # type: ignore[arg-type]
        ledger,
        FlightRecorder(2),
        EventReader(
            tempfile.mkdtemp(prefix="ld-recovery-"), functools.partial(repair.take_event, sup)
        ),
        streams=None,
    )
    recovery = Recovery(
        parts,
        respawns=0,
        context=None,
        probe=probe,
        successor=lambda plan: ("successor", plan),
    )
    recovery.repair.watches(pool)  # type: ignore[arg-type]
    return recovery, books, pool, sup, probed


def _death(index: int = 4) -> PoolFailure:
    return PoolFailure(
        Evidence(
            kind="death",
            worker_id=0,
            pid=100,
            signal="SIGSEGV",
            stage="fetch",
            in_flight_index=index,
            batch_indices=[4, 5],
            batch=2,
        )
    )


def test_a_sample_that_kills_its_worker_again_is_quarantined_and_the_worker_replaced_alone() -> (
    None
):
    recovery, books, pool, sup, probed = _setup(probe_finds=4)
    with pytest.warns(HealWarning, match=r"-> quarantined \(sample 4\)$"):
        outcome = recovery.handle(_death())
    assert outcome == Resumed()
    assert probed == [[4], [6]]  # the sample alone, then task 3's, loaded ahead: the control
    assert list(sup.quarantine) == [4]
    assert pool.respawned == [0]  # worker 0 alone; worker 1 ran on
    assert books.workers_status == [True, True]
    # worker 0's owed batches, re-sent whole and in order: the worker leaves 4 out, told of it
    # (as every live worker) through the live quarantine
    assert pool.queues[0] == [(0, [0, 1]), (2, [4, 5])]
    assert books.num_tasks == [2, 2]
    assert (recovery.repair.respawns, sup.counts.resent_batches) == (1, 2)
    assert [incident.action for incident in sup.log] == ["quarantined"]
    assert books.shut == pool.stopped == 0


def test_without_healing_the_death_is_raised_and_the_pool_stopped() -> None:
    recovery, books, pool, sup, probed = _setup(heal=False)
    outcome = recovery.handle(_death())
    assert isinstance(outcome, Raise)
    assert isinstance(outcome.error, WorkerDiedError)
    assert outcome.failure is not None and outcome.failure[1].cause == outcome.error.diagnosis.cause
    assert str(outcome.error).startswith(outcome.failure[0].split("\n")[0])
    assert (probed, pool.respawned, pool.stopped, books.shut) == ([], [], 1, 1)
    assert [incident.action for incident in sup.log] == ["raised"]


def test_a_result_queue_left_unusable_rebuilds_the_pool_with_every_owed_batch() -> None:
    recovery, books, pool, sup, _ = _setup(probe_finds=None)
    recovery.repair.result_queue_unreadable()
    with pytest.warns(HealWarning):
        outcome = recovery.handle(_death())
    assert isinstance(outcome, HandOver)
    name, plan = outcome.successor
    assert name == "successor" and isinstance(plan, Successor)
    assert (plan.plain, plan.respawns, plan.streams, plan.supervision) == (False, 1, None, sup)
    assert plan.snapshot.num_workers == 2 and plan.snapshot.persistent_workers is False
    # the owed batches first, in order, then the sampler's rest
    assert list(plan.snapshot._index_sampler) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    assert pool.respawned == [] and (pool.stopped, books.shut) == (1, 1)
    assert len(recovery.parts.ledger) == 0 and sup.counts.resent_batches == 4
    incident = sup.log[0]
    assert "half a message" in incident.diagnosis.evidence[-1]


def test_a_quarantine_the_live_workers_cannot_be_told_rebuilds_the_pool() -> None:
    """A full table of quarantined samples: a replacement alone would load the sample again,
    so the pool is rebuilt, its new workers knowing the whole quarantine."""
    recovery, _, pool, sup, _ = _setup(probe_finds=4)
    sup.live_quarantines.add(full := LiveQuarantine(capacity=0))
    with pytest.warns(HealWarning, match=r"-> quarantined \(sample 4\)$"):
        outcome = recovery.handle(_death())
    assert isinstance(outcome, HandOver) and list(sup.quarantine) == [4]
    assert sup.log[0].diagnosis.evidence[-1] == TABLE_FULL_NOTE
    assert pool.stopped == 1 and full.written == 0


class _DiagnosisStub:
    cause = "native-crash"
    title = "native crash"
    evidence: list[str] = []
    indices: list[Any] = []
    sample_file = None


def test_books_hold_the_iterator_weakly() -> None:
    """A Recovery kept by its iterator reaches the iterator only weakly: no reference cycle."""

    class Owner:
        _num_workers = 3

    owner = Owner()
    books = torch_compat.IteratorBooks(owner)
    owner.books = books  # type: ignore[attr-defined]  # as the iterator keeps its Recovery's
    assert books.num_workers == 3
    gc.collect()
    gc.disable()
    try:
        freed = weakref.ref(owner)
        del owner
        assert freed() is None, "the books hold their iterator in a reference cycle"
    finally:
        gc.enable()
    with pytest.raises(ReferenceError):
        books.num_workers  # noqa: B018


def test_recovery_of_a_fake_pool_warns_nothing_when_it_raises() -> None:
    recovery, _, _, _, _ = _setup(heal=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(recovery.handle(_death()), Raise)


def _hang_while_building() -> PoolFailure:
    return PoolFailure(
        Evidence(
            kind="hang",
            worker_id=0,
            pid=100,
            stage="fetch",
            in_flight_index=4,
            batch_indices=[4, 5],
            batch=2,
        )
    )


@pytest.mark.parametrize(("probe_finds", "action"), [(4, "quarantined"), (None, "respawned")])
def test_a_worker_stuck_while_the_pool_is_built_starts_it_over(
    probe_finds: Any, action: str
) -> None:
    # torchdata's __init__ re-reads batches: a sample stuck there is re-tried alone first, and
    # quarantined where it gets stuck again; either way a new pool starts over
    recovery, _, _, sup, probed = _setup(probe_finds=probe_finds)
    with pytest.warns(HealWarning, match=rf"-> {action}"):
        outcome = recovery.restart(_hang_while_building(), lambda: "the resume point")
    assert isinstance(outcome, HandOver)
    successor, plan = outcome.successor
    assert (successor, plan.resume_point) == ("successor", "the resume point")
    assert probed[0] == [4]
    assert list(sup.quarantine) == ([4] if probe_finds == 4 else [])
    assert [incident.action for incident in sup.log] == [action]
    assert (
        "got stuck while the pool started: a new pool starts over"
        in (sup.log[0].diagnosis.evidence[-1])
    )
