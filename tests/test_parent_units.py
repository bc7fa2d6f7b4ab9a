"""The parent's parts alone: Ledger, Pool, WorkerWatch and StreamProgress, with fake processes.

No worker process starts here. A fake process says whether it is alive and how it ended; the
flight recorder is the real one (shared memory in this process), its rows written as a worker
writes them. Recovery alone is in ``test_recovery.py``.
"""

from __future__ import annotations

import os
import queue
import tempfile
import time
from typing import Any

import pytest

from loaderdoctor.recorder import N_FIELDS, NAME_WORDS, Field, FlightRecorder, Stage
from loaderdoctor.supervise.heal import HealWarning
from loaderdoctor.supervise.parent.ledger import Ledger
from loaderdoctor.supervise.parent.pool import Pool
from loaderdoctor.supervise.parent.watch import PoolFailure, WorkerWatch
from loaderdoctor.supervise.streams import StreamBatch, StreamProgress
from loaderdoctor.torch_compat import WorkerLists


# --- Ledger ---------------------------------------------------------------------------------------
def test_the_ledger_owes_each_batch_until_torch_takes_it_off_its_books() -> None:
    ledger = Ledger()
    ledger.owe(0, [0, 1])
    ledger.owe(1, [2, 3])
    ledger.owe(2, [4, 5])
    assert ledger.owed_in_order() == [[0, 1], [2, 3], [4, 5]]
    # torch popped task 1 from _task_info: it is the one being handed over
    assert ledger.settle_handed_over({0, 2}) == (1, [2, 3])
    assert ledger.settle_handed_over({0, 2}) == (None, None)  # nothing new handed over
    assert (len(ledger), ledger.owed_in_order()) == (2, [[0, 1], [4, 5]])
    ledger.owe(0, [1])  # owed again
    assert ledger.indices_of(0) == [1]
    ledger.clear()
    assert len(ledger) == 0 and ledger.owed_in_order() == []


# --- Pool -----------------------------------------------------------------------------------------
class FakeProcess:
    def __init__(self, pid: int, exitcode: int | None = None) -> None:
        self.pid = pid
        self.exitcode = exitcode
        self.daemon = False
        self.killed = False
        self.started = False

    def is_alive(self) -> bool:
        return self.exitcode is None and not self.killed

    def kill(self) -> None:
        self.killed = True
        self.exitcode = -9

    def join(self, timeout: float | None = None) -> None:
        pass

    def start(self) -> None:
        self.started = True


class FakeQueue:
    def __init__(self) -> None:
        self.closed = False

    def cancel_join_thread(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class FakeContext:
    started: list[tuple[Any, ...]] = []

    def Queue(self) -> FakeQueue:
        return FakeQueue()

    def Process(self, target: Any, args: tuple[Any, ...]) -> FakeProcess:
        FakeContext.started.append(args)
        return FakeProcess(900 + len(FakeContext.started))


def test_the_pool_says_how_each_worker_ended() -> None:
    workers = [FakeProcess(101), FakeProcess(102, exitcode=-11), FakeProcess(103, exitcode=3)]
    pool = Pool(WorkerLists(workers, [FakeQueue() for _ in workers], None), tempfile.mkdtemp())
    assert (len(pool), pool.pids(), pool.pid(1)) == (3, {101, 102, 103}, 102)
    assert [pool.is_alive(w) for w in range(3)] == [True, False, False]
    assert [pool.how_it_ended(w) for w in range(3)] == [
        (None, None),
        ("SIGSEGV", None),
        (None, 3),
    ]
    pool.kill(0)
    assert workers[0].killed and pool.how_it_ended(0) == ("SIGKILL", None)


def test_a_respawn_replaces_one_worker_in_torchs_own_lists() -> None:
    workers = [FakeProcess(101), FakeProcess(102, exitcode=-9)]
    queues = [FakeQueue(), FakeQueue()]
    old_queue = queues[1]
    pool = Pool(WorkerLists(workers, queues, None), tempfile.mkdtemp())
    FakeContext.started.clear()
    old_pid, new_pid = pool.respawn(1, FakeContext(), lambda index_queue: ("args", index_queue))
    assert (old_pid, new_pid) == (102, 901)
    # the very lists torch's iterator keeps, changed in place; worker 0 untouched
    assert workers[1].pid == 901 and workers[1].started and workers[1].daemon
    assert workers[0].pid == 101 and not workers[0].killed
    assert old_queue.closed and queues[1] is not old_queue
    assert FakeContext.started == [("args", queues[1])]
    assert pool.index_queue(1) is queues[1]


# --- WorkerWatch ------------------------------------------------------------------------------------
def _watch(
    workers: list[FakeProcess], hang_timeout: float | None = None
) -> tuple[WorkerWatch, FlightRecorder, Ledger]:
    recorder = FlightRecorder(len(workers))
    ledger = Ledger()
    pool = Pool(WorkerLists(workers, [FakeQueue() for _ in workers], None), tempfile.mkdtemp())
    watch = WorkerWatch(
        pool,
        recorder,
        ledger,
        dataset=list(range(100)),
        start_method="fork",
        iterable=False,
        hang_timeout=hang_timeout,
        epoch=0,
    )
    return watch, recorder, ledger


def test_the_watch_finds_nothing_while_every_busy_worker_lives() -> None:
    watch, recorder, _ = _watch([FakeProcess(101), FakeProcess(102, exitcode=0)])
    for worker_id in range(2):
        recorder.reset_slot(worker_id)
    # worker 1 exited, but torch marked it idle (its stream ended): not a death
    assert watch.poll([True, False], {0: (0,)}) is None


def test_the_watch_names_a_dead_workers_sample_and_batch() -> None:
    watch, recorder, ledger = _watch([FakeProcess(101), FakeProcess(os.getpid(), exitcode=-11)])
    recorder.reset_slot(1)
    slot = recorder.attach(1)  # as the worker's own row says it: fetching sample 13
    slot.fetching(13)
    ledger.owe(0, [10, 11])
    ledger.owe(1, [12, 13])
    ev = watch.poll([True, True], {0: (0,), 1: (1,)})
    assert ev is not None
    assert (ev.kind, ev.worker_id, ev.signal, ev.exit_code) == ("death", 1, "SIGSEGV", None)
    assert (ev.in_flight_index, ev.batch, ev.batch_indices) == (13, 1, [12, 13])
    assert ev.reached_worker_init is True and ev.epoch == 0


def test_the_watch_calls_a_worker_stuck_past_the_hang_timeout_a_hang_and_kills_it() -> None:
    workers = [FakeProcess(101), FakeProcess(102)]
    watch, recorder, ledger = _watch(workers, hang_timeout=5.0)
    for worker_id in range(2):
        recorder.reset_slot(worker_id)
        recorder.attach(worker_id).fetching(worker_id)
    ledger.owe(0, [0])
    ledger.owe(1, [1])
    tasks = {0: (0,), 1: (1,)}
    assert watch.poll([True, True], tasks) is None  # both fetching, for less than 5 s
    # worker 1's row says it entered its fetch 6 s ago (no sleep: the row is written as is)
    recorder.view[1 * N_FIELDS + Field.STAGE_SINCE_NS] = time.monotonic_ns() - 6_000_000_000
    ev = watch.poll([True, True], tasks)
    assert ev is not None
    assert (ev.kind, ev.worker_id, ev.in_flight_index, ev.batch) == ("hang", 1, 1, 1)
    assert ev.seconds_without_progress is not None and ev.seconds_without_progress >= 6
    assert workers[1].killed and not workers[0].killed
    assert ev.notes[0].startswith("the stuck worker's Python stack could not be dumped: ")


def test_without_a_hang_timeout_a_slow_worker_is_never_a_hang() -> None:
    watch, recorder, _ = _watch([FakeProcess(101)])
    recorder.reset_slot(0)
    recorder.attach(0).stage(Stage.FETCH)
    recorder.view[Field.STAGE_SINCE_NS] = time.monotonic_ns() - 3600 * 1_000_000_000
    assert watch.poll([True], {0: (0,)}) is None


class Books:
    """What ``WorkerWatch.wait`` reads of the books of an iterator whose pin-memory thread
    feeds it."""

    reads_result_queue = False

    def __init__(self, busy: list[bool], tasks: dict[int, Any], *messages: Any) -> None:
        self.workers_status, self.task_info = busy, tasks
        self.data_queue: queue.Queue[Any] = queue.Queue()
        for message in messages:
            self.data_queue.put(message)

    def receive(self, timeout: float) -> Any:
        return self.data_queue.get(timeout=timeout)


def test_the_shared_receive_loop_returns_a_message_or_says_none_came() -> None:
    watch, recorder, _ = _watch([FakeProcess(101)])
    recorder.reset_slot(0)
    books: Any = Books([True], {0: (0,)}, (0, "batch"))
    assert watch.wait(books, timeout=5.0) == (True, (0, "batch"))
    assert watch.wait(books, timeout=0.05) == (False, None)  # torch's timeout answer


def test_the_shared_receive_loop_raises_a_dead_workers_evidence() -> None:
    watch, recorder, ledger = _watch([FakeProcess(os.getpid(), exitcode=-9)])
    recorder.reset_slot(0)
    ledger.owe(0, [4, 5])
    books: Any = Books([True], {0: (0,)})
    with pytest.raises(PoolFailure) as raised:
        watch.wait(books, timeout=60.0)  # the first look finds it: no 60 s wait
    ev = raised.value.evidence
    assert (ev.kind, ev.worker_id, ev.signal, ev.batch_indices) == ("death", 0, "SIGKILL", [4, 5])
    assert raised.value.__context__ is None  # not chained under the queue's Empty


# --- StreamProgress ---------------------------------------------------------------------------------
def _batch(worker: int, first: int, end: int, state: Any = None) -> StreamBatch:
    return StreamBatch(list(range(first, end)), worker, first, end, end - first, state=state)


def test_a_stream_resumes_after_its_last_delivered_item() -> None:
    progress = StreamProgress()
    assert progress.delivered(_batch(0, 0, 4)) == 4
    progress.delivered(_batch(1, 0, 2))
    progress.delivered(_batch(0, 4, 6, state={"at": 6}))
    resume = progress.resume_for(0)
    assert (resume.skip, resume.state, resume.ended, resume.stop) == (6, {"at": 6}, False, None)
    assert progress.resume_for(1).skip == 2
    # a worker replaced alone resumes past what waits in torch's reorder buffer
    assert progress.resume_after(0, [_batch(0, 6, 8, state={"at": 8})]).skip == 8
    assert progress.resume_after(0, [_batch(0, 2, 4)]).skip == 6  # delivered already


def test_a_stream_item_that_kills_its_worker_twice_ends_that_stream_before_it() -> None:
    progress = StreamProgress()
    progress.delivered(_batch(0, 0, 3))
    assert progress.culprit(0, 5) is True  # re-tried once when the stream resumes
    assert progress.resume_for(0).culprits == frozenset({5})
    assert progress.culprit(0, 5) is False  # again: the stream cannot be read past it
    assert progress.resume_for(0).stop == 5
    assert progress.resume_for(1).stop is None  # the other workers' streams go on


def test_what_a_resumed_stream_learns_is_linked_to_the_incident_written_before() -> None:
    """A stream culprit's key is read only when its stream resumes, after its incident was
    written: it arrives as a linked follow-up (once), which the log's readers see merged."""
    from loaderdoctor.forensics import Diagnosis
    from loaderdoctor.supervise.parent import repair
    from loaderdoctor.supervise.parent.incidents import IncidentLog

    log = IncidentLog()
    death = Diagnosis("killed-by-signal", "killed", 0.9, 1, 4242, "SIGKILL", None, [], ["died"], [])
    death.position = 5
    progress = StreamProgress()
    assert progress.culprit(1, 5)
    written = log.append(death, "respawned")
    progress.incident_written(written, 1, 5, retried=True)
    progress.notes.append("a replay of worker 1's stream did not match")
    with pytest.warns(HealWarning):
        progress.delivered(StreamBatch([9], 1, 5, 6, 1, culprits=((5, "k5"),)))
        progress.say_notes()
    progress.delivered(StreamBatch([9], 1, 5, 6, 1, culprits=((5, "k5"),)))  # said once
    supervision = type("OnlyItsLog", (), {"log": log})()
    repair.follow_up(supervision, progress.take_learnt())
    assert progress.take_learnt() == []
    assert (death.key, death.evidence) == (None, ["died"])  # written: final
    merged = log[0].diagnosis
    assert merged.key == "k5"
    assert merged.evidence == [
        "died",
        "item #5 of worker 1's stream has key 'k5' (read again when the stream resumed)",
        "a replay of worker 1's stream did not match",
    ]
    assert log[0].to_dict()["key"] == "k5"


@pytest.mark.parametrize("ended_then_buffered", [False, True])
def test_a_streams_end_counts_only_once_its_batches_reached_the_user(
    ended_then_buffered: bool,
) -> None:
    progress = StreamProgress()
    progress.ended(0)
    if ended_then_buffered:
        progress.not_ended(0)
    assert progress.resume_for(0).ended is not ended_then_buffered


# --- Settings: the keyword-only extras of both supervised loaders, in one place -------------------
def test_settings_fill_in_the_defaults_the_readme_states() -> None:
    from pathlib import Path

    from loaderdoctor.supervise.parent.supervision import Settings
    from loaderdoctor.supervise.shared_failure import Budget

    assert Settings.from_keywords(None, False, None, None, None, False) == Settings(
        None, False, "raise", 0, None, False
    )
    healing = Settings.from_keywords(5.0, True, None, None, Path("/q.json"), True)
    assert healing == Settings(5.0, True, "skip", 1, "/q.json", True, Budget(fraction=0.5))
    # on_error without healing skips what it is asked to: no budget unless one is given
    assert Settings.from_keywords(None, False, "skip", None, None, False).max_skipped is None
    budget = Settings.from_keywords(None, False, "skip", None, None, False, 10).max_skipped
    assert budget == Budget(count=10)
    assert Settings.from_keywords(None, True, "replace", 3, None, False).retries == 3


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"hang_timeout": 0}, "hang_timeout must be a positive number of seconds, or None"),
        ({"on_error": "ignore"}, "on_error must be one of raise, skip, replace, got 'ignore'"),
        ({"retries": -1}, "retries must be >= 0"),
    ],
)
def test_both_supervised_loaders_refuse_a_bad_setting_in_one_line(
    keywords: dict[str, Any], message: str
) -> None:
    import loaderdoctor

    loaders = [loaderdoctor.DataLoader]
    try:
        loaders.append(loaderdoctor.StatefulDataLoader)
    except ModuleNotFoundError:  # torchdata is an extra (the eco extra has it)
        pass
    for loader in loaders:
        with pytest.raises(ValueError) as raised:
            loader(list(range(4)), **keywords)
        assert str(raised.value) == message, loader


def test_a_quarantined_samples_substitute_is_said_on_the_incident_that_quarantined_it() -> None:
    """Under torch.distributed a skip becomes a replacement: the quarantined sample's place is
    filled by another sample, which so arrives twice; the incident that quarantined it says so."""
    from loaderdoctor.forensics import Diagnosis
    from loaderdoctor.supervise.parent import repair
    from loaderdoctor.supervise.parent.incidents import INCIDENT_SINKS, FollowUp
    from loaderdoctor.supervise.parent.supervision import Settings, Supervision

    settings = Settings.from_keywords(None, True, "replace", None, None, False)
    supervision = Supervision(settings, list(range(50)), lambda: None)
    crash = Diagnosis("native-crash", "crashed", 0.9, 1, 4242, "SIGSEGV", None, [37], [], [])
    sunk: list[Any] = []
    INCIDENT_SINKS.append(lambda owner, record: sunk.append(record))
    try:
        written = supervision.log.append(crash, "quarantined")
        for epoch in (0, 1):  # said once, not per epoch
            supervision.epoch = epoch
            repair.take_event(
                supervision,
                {"index": 37, "stage": "quarantined", "action": "replaced", "substitute": 38},
            )
    finally:
        INCIDENT_SINKS.pop()
    said = "its place in a batch of epoch 0 was filled by sample 38, which so arrives twice"
    assert crash.evidence == []  # the incident written is final: what came later is linked
    assert sunk == [written, FollowUp(written.id, (said,))]
    assert supervision.log[0].diagnosis.evidence == [said]
    assert supervision.counts.replaced == 2
    assert [i.action for i in supervision.log] == ["quarantined"]


def test_a_stream_items_name_round_trips_through_the_recorder_and_a_long_one_is_cut() -> None:
    recorder = FlightRecorder(2)
    recorder.reset_slot(1)
    slot = recorder.attach(1)
    assert recorder.snapshot(1).named_position is None
    slot.name_item(7, "s2-0007", "/data/shard-2.tar")
    snapshot = recorder.snapshot(1)
    assert (snapshot.named_position, snapshot.named_key, snapshot.named_url) == (
        7,
        "s2-0007",
        "/data/shard-2.tar",
    )
    slot.name_item(8, "ключ-" + "x" * 500, None)  # a later, longer name replaces it whole
    snapshot = recorder.snapshot(1)
    assert (snapshot.named_position, snapshot.named_url) == (8, None)
    assert snapshot.named_key == ("ключ-" + "x" * 500).encode()[: NAME_WORDS * 8].decode()
    assert recorder.snapshot(0).named_key is None  # the other worker's row is untouched
