"""Healing a worker death in an IterableDataset (issue 14): every worker resumes its own stream.

A stream sharded by ``get_worker_info()`` over 4 workers; one worker dies at one item (SIGKILL,
SIGSEGV, ``os._exit``, a hang). Each healthy item arrives exactly once, the item in flight is
skipped and named by (worker, position).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import tempfile
import time
import warnings
from collections import Counter
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loaderdoctor
from ld_datasets import StreamLedger
from loaderdoctor.supervise.heal import HealWarning
from loaderdoctor.supervise.streams import StreamBatch, StreamProgress, item_key

N = 60
WORKERS = 4
BAD = 21  # worker 21 % 4 = 1, its item #5 (1, 5, 9, 13, 17, 21)


def fault(mode: str) -> None:
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "segv":
        ctypes.string_at(0)
    elif mode == "exit":
        os._exit(3)
    elif mode == "hang":
        time.sleep(120)
    elif mode == "raise":
        raise ValueError("a bad record")


class Sharded(torch.utils.data.IterableDataset):
    """Items 0..n-1, each worker its share (``i % num_workers == id``); ``bad`` faults once
    (``once``: a flag file makes it a transient fault, as an external kill is) or every time."""

    def __init__(self, mode: str, flag_dir: str, bad: int = BAD, once: bool = True) -> None:
        self.mode, self.flag_dir, self.bad, self.once = mode, flag_dir, bad, once

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for i in range(worker, N, workers):
            if i == self.bad:
                flag = os.path.join(self.flag_dir, "fired")
                if not (self.once and os.path.exists(flag)):
                    Path(flag).touch()
                    fault(self.mode)
            yield i


def load(dataset: Any, batch_size: int | None = 2, **kwargs: Any) -> tuple[list[int], Any, list]:
    loader = loaderdoctor.DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=WORKERS,
        heal=True,
        hang_timeout=1.0,
        **kwargs,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", HealWarning)
        items: list[int] = []
        for batch in loader:  # the user's line: every HealWarning points here
            items.extend(batch.tolist() if isinstance(batch, torch.Tensor) else [batch])
    heal_warnings = [w for w in caught if issubclass(w.category, HealWarning)]
    return items, loader, heal_warnings


@pytest.fixture
def flag_dir() -> Any:
    with tempfile.TemporaryDirectory(prefix="streams-") as path:
        yield path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "cause"),
    [
        ("sigkill", "killed-by-signal"),
        ("segv", "native-crash"),
        ("exit", "worker-exit"),
        ("hang", "worker-hang"),
    ],
)
def test_a_death_in_one_stream_skips_its_item_and_delivers_the_rest_once(
    mode: str, cause: str, flag_dir: str
) -> None:
    items, loader, caught = load(Sharded(mode, flag_dir))
    assert Counter(items) == Counter(i for i in range(N) if i != BAD)
    incidents = [(i.diagnosis.cause, i.action, i.diagnosis.worker_id) for i in loader.incidents]
    assert incidents == [(cause, "skipped", 1)]
    diagnosis = loader.incidents[0].diagnosis
    assert diagnosis.position == 5
    # the loader's batch number in flight depends on how far the other workers got
    in_flight = [line for line in diagnosis.evidence if line.startswith("in flight:")]
    assert len(in_flight) == 1
    assert fnmatch(in_flight[0], "in flight: item #5 of worker 1's stream, fetch stage, batch *")
    assert (
        "item #5 of worker 1's stream is skipped: every worker resumes its stream after its "
        "last delivered item, worker 1 past that item" in diagnosis.evidence
    )
    assert not [line for line in diagnosis.evidence if line.startswith("batch indices:")]
    counts = loader.report.counts
    assert (counts["samples"], counts["skipped"]) == (N - 1, 1)
    assert [str(w.message) for w in caught] == [
        f"loaderdoctor healed: {diagnosis.title} [{cause}] -> skipped "
        "(item #5 of worker 1's stream)"
    ]
    assert [w.filename for w in caught] == [__file__]


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [None, 5])
def test_unbatched_and_pinned_streams_resume_too(batch_size: int | None, flag_dir: str) -> None:
    items, loader, _ = load(Sharded("sigkill", flag_dir), batch_size=batch_size, pin_memory=True)
    assert Counter(items) == Counter(i for i in range(N) if i != BAD)
    assert loader.report.counts["samples"] == N - 1


@pytest.mark.slow
def test_a_death_every_time_at_one_item_ends_that_stream_loudly(flag_dir: str) -> None:
    """A generator cannot be read past an item that kills its worker each time: that worker's
    stream stops at its last delivered item, the other three finish, and the report says so."""
    items, loader, caught = load(Sharded("sigkill", flag_dir, once=False))
    worker_1 = [i for i in range(1, N, WORKERS)]
    others = [i for i in range(N) if i % WORKERS != 1]
    assert Counter(i for i in items if i % WORKERS != 1) == Counter(others)
    delivered_1 = sorted(i for i in items if i % WORKERS == 1)
    assert delivered_1 == worker_1[: len(delivered_1)] and BAD not in delivered_1
    assert [(i.diagnosis.cause, i.action) for i in loader.incidents] == [
        ("killed-by-signal", "skipped"),
        ("killed-by-signal", "skipped"),
    ]
    last = len(delivered_1) - 1
    assert (
        f"worker 1 died at its item #5 again: its stream cannot be read past it, so worker 1's "
        f"items after #{last} are lost (the other workers resume)"
    ) in loader.incidents[1].diagnosis.evidence
    assert str(caught[-1].message).endswith(
        "-> skipped (item #5 of worker 1's stream; the rest of worker 1's stream is lost)"
    )


class Keyed(torch.utils.data.IterableDataset):
    """Dict items with a ``__key__``; ``shuffled`` makes the order differ on every read."""

    def __init__(self, flag_dir: str, shuffled: bool = False, declared: bool | None = None):
        self.flag_dir, self.shuffled = flag_dir, shuffled
        if declared is not None:
            self.loaderdoctor_replayable = declared

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        mine = list(range(info.id, N, info.num_workers))
        if self.shuffled and info.id == 1:
            mine[:-1] = sorted(mine[:-1], key=lambda _: os.urandom(4))
        for position, i in enumerate(mine):
            if info.id == 1 and position == 5:
                flag = os.path.join(self.flag_dir, "fired")
                if not os.path.exists(flag):
                    Path(flag).touch()
                    fault("sigkill")
            yield {"__key__": f"sample-{i:03d}", "value": i}


@pytest.mark.slow
def test_a_stream_that_replays_differently_is_named_not_replayable(flag_dir: str) -> None:
    loader = loaderdoctor.DataLoader(
        Keyed(flag_dir, shuffled=True), batch_size=2, num_workers=WORKERS, heal=True
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", HealWarning)
        for _ in loader:
            pass
    notes = [str(w.message) for w in caught if "not replayable" in str(w.message)]
    assert len(notes) == 1
    assert notes[0].startswith("loaderdoctor: stream of worker 1 is not replayable: its item #")
    # worker 1 had delivered 2 or 4 items (its batch of #4-#5 is sent after two deliveries)
    assert fnmatch(notes[0], "*when replayed, so up to [24] items may be duplicated or lost")
    evidence = loader.incidents[0].diagnosis.evidence
    assert notes[0].removeprefix("loaderdoctor: ") in evidence
    assert loader.incidents[0].diagnosis.key is None  # a replay that differs names nothing


@pytest.mark.slow
def test_a_stream_declared_not_replayable_says_so(flag_dir: str) -> None:
    loader = loaderdoctor.DataLoader(
        Keyed(flag_dir, declared=False), batch_size=2, num_workers=WORKERS, heal=True
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", HealWarning)
        for _ in loader:
            pass
    notes = [str(w.message) for w in caught if "not replayable" in str(w.message)]
    # every worker that had delivered items resumes a stream it cannot replay: each says so
    pattern = (
        "loaderdoctor: stream of worker [0-3] is not replayable (the dataset says "
        "loaderdoctor_replayable=False): up to * items may be duplicated or lost"
    )
    assert notes and all(fnmatch(note, pattern) for note in notes)
    assert any(note.startswith("loaderdoctor: stream of worker 1 ") for note in notes)


class Counting(torch.utils.data.IterableDataset):
    """A Stateful stream (``state_dict``/``load_state_dict``): it resumes from its state, and
    counts how many items each worker's iterator produced (a replay would produce more)."""

    def __init__(self, flag_dir: str) -> None:
        self.flag_dir = flag_dir
        self.start = 0

    def state_dict(self) -> dict[str, int]:
        return {"next": self.next}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.start = state["next"]

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        mine = list(range(info.id, N, info.num_workers))
        self.next = self.start
        while self.next < len(mine):
            position = self.next
            self.next += 1
            if info.id == 1 and position == 5:
                flag = os.path.join(self.flag_dir, "fired")
                if not os.path.exists(flag):
                    Path(flag).touch()
                    fault("sigkill")
            produced = os.path.join(self.flag_dir, f"produced-{info.id}-{os.getpid()}")
            with open(produced, "a") as handle:
                handle.write(f"{position}\n")
            yield mine[position]


@pytest.mark.slow
def test_a_stateful_stream_resumes_from_its_state_without_replaying(flag_dir: str) -> None:
    items, _, _ = load(Counting(flag_dir))
    assert Counter(items) == Counter(i for i in range(N) if i != BAD)
    produced_by_1 = [
        [int(line) for line in Path(flag_dir, name).read_text().split()]
        for name in sorted(os.listdir(flag_dir))
        if name.startswith("produced-1-")
    ]
    # worker 1's batch of #4-#5 is sent after two deliveries, so its batch #0-#1 was delivered
    # (and maybe #2-#3): the re-started worker 1 loads the state after it and reads on from #2
    # or #4, never from #0
    assert len(produced_by_1) == 2
    first, restarted = sorted(produced_by_1, key=lambda p: p[0])
    assert first[0] == 0 and restarted[0] in (2, 4)
    assert restarted == list(range(restarted[0], 15))


def test_progress_keeps_what_each_worker_delivered_and_its_culprits() -> None:
    progress = StreamProgress()
    assert progress.delivered(StreamBatch([0, 4], 0, 0, 2, 2, ((0, 0), (1, 4)))) == 2
    assert progress.delivered(StreamBatch([5], 1, 0, 2, 1)) == 1  # position 0 was skipped
    progress.skipped(1, 3)
    assert progress.culprit(1, 4)
    assert not progress.culprit(1, 4)  # the second time: the stream cannot be read past it
    resume = progress.resume_for(1)
    assert (resume.skip, resume.culprits, resume.reported, resume.ended) == (
        2,
        frozenset({4}),
        frozenset({3}),
        False,
    )
    assert progress.resume_for(0).keys == ((0, 0), (1, 4))
    progress.ended(2)
    assert progress.resume_for(2).ended
    progress.not_ended(2)  # its batches were still in torch's reorder buffer
    assert not progress.resume_for(2).ended


def test_item_keys_name_webdataset_samples_and_files() -> None:
    assert item_key({"__key__": "a/b/0001", "jpg": b""}) == "a/b/0001"
    assert item_key({"__key__": "0001", "__url__": "shard-0.tar"}) == "0001"
    assert item_key(("img/0001.png", b"...")) == "img/0001.png"
    assert item_key(7) == 7
    assert item_key(torch.zeros(3)) is None


@pytest.mark.slow
def test_run_heal_heals_a_killed_stream_worker_in_an_unmodified_script(tmp_path: Path) -> None:
    from test_run import RUN_FIXTURES, ld_run

    flag = tmp_path / "fired"
    result, report = ld_run(
        tmp_path / "report", "--heal", str(RUN_FIXTURES / "stream.py"), str(flag)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    epochs = [json.loads(line) for line in result.stdout.splitlines()]
    assert epochs == [[i for i in range(40) if i != 13], list(range(40))]
    assert report["status"] == "healed"
    incidents = [
        (i["cause"], i["action"], i["worker_id"], i["position"], i["indices"])
        for i in report["incidents"]
    ]
    assert incidents == [("killed-by-signal", "skipped", 1, 6, [])]  # 1, 3, 5, ... 13: #6
    assert report["delivered"]["samples"] == 79


STREAM_FAULTS = st.sampled_from(["raise", "raise-once", "kill-once"])


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("LOADERDOCTOR_LEDGER_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    n=st.integers(6, 28),
    batch_size=st.integers(1, 5),
    workers=st.integers(1, 3),
    persistent=st.booleans(),
    data=st.data(),
)
def test_exactly_once_ledger_of_streams(
    n: int, batch_size: int, workers: int, persistent: bool, data: Any
) -> None:
    """Every item of every worker's stream once per epoch: the faulty ones skipped in the first
    epoch (and delivered in the second, once their fault has fired); an item that raises every
    time ends its generator, so its worker delivers exactly its items before it."""
    bad = data.draw(st.lists(st.integers(0, n - 1), max_size=3, unique=True))
    faults = {i: data.draw(STREAM_FAULTS) for i in bad}
    flag_dir = tempfile.mkdtemp(prefix="stream-ledger-")
    try:
        loader = loaderdoctor.DataLoader(
            StreamLedger(n, faults, flag_dir),
            batch_size=batch_size,
            num_workers=workers,
            persistent_workers=persistent,
            heal=True,
            on_error="skip",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", HealWarning)
            epochs = [[int(row[0]) for batch in loader for row in batch] for _ in range(2)]
        for epoch, items in enumerate(epochs):
            counts = Counter(items)
            assert all(c == 1 for c in counts.values()), f"an item arrived twice: {counts}"
            expected: set[int] = set()
            reached: set[int] = set()
            for worker in range(workers):
                for i in range(worker, n, workers):
                    if faults.get(i) == "raise":
                        break  # a generator cannot go on after it raises
                    reached.add(i)
                    if epoch == 0 and i in faults:
                        continue  # skipped (raise-once) or the culprit of a death (kill-once)
                    expected.add(i)
            # A worker that died while the pool was being stopped for another death re-reads
            # its item in flight in the re-started pool (it was not named a culprit): once.
            lost = expected - set(counts)
            extra = set(counts) - expected
            assert not lost and extra <= {i for i, f in faults.items() if f == "kill-once"}, (
                f"epoch {epoch}: {sorted(counts)} ({faults})"
            )
            if epoch == 0:
                named = {
                    (i.diagnosis.worker_id, i.diagnosis.position)
                    for i in loader.incidents
                    if i.diagnosis.cause == "killed-by-signal"
                }
                for i, fault in faults.items():
                    if fault == "kill-once" and i in reached and i not in counts:
                        assert (i % workers, i // workers) in named, (i, named)

    finally:
        shutil.rmtree(flag_dir, ignore_errors=True)


class RankSharded(torch.utils.data.IterableDataset):
    """DistributedSampler-style: this rank's items (``RANK``/``WORLD_SIZE``), then this worker's."""

    def __init__(self, flag_dir: str) -> None:
        self.flag_dir = flag_dir

    def __iter__(self) -> Any:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        info = torch.utils.data.get_worker_info()
        mine = list(range(rank, N, world))[info.id :: info.num_workers]
        for i in mine:
            if i == 23:  # rank 1's item #11, worker 3's item #2
                flag = os.path.join(self.flag_dir, "fired")
                if not os.path.exists(flag):
                    Path(flag).touch()
                    fault("sigkill")
            yield i


@pytest.mark.slow
def test_a_rank_sharded_stream_resumes_within_its_rank(
    flag_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    items, loader, _ = load(RankSharded(flag_dir))
    assert Counter(items) == Counter(i for i in range(1, N, 2) if i != 23)
    assert [(i.diagnosis.worker_id, i.diagnosis.position) for i in loader.incidents] == [(3, 2)]
