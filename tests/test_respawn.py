"""A worker death costs one worker, not the pool (map-style datasets).

Real faults in one worker of four: the dead worker is replaced by a new process with its
worker_id and seed, the batches it owed are re-sent, and the other three keep running (same pids,
their per-process counters keep counting). Every healthy sample arrives exactly once.
"""

from __future__ import annotations

import ctypes
import fnmatch
import gc
import os
import signal
import struct
import sys
import time
import warnings
import weakref
from collections import Counter, defaultdict
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset, get_worker_info

import loaderdoctor
from ld_datasets import quiet_result_queue
from loaderdoctor.supervise.heal import HealWarning

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes"),
]

N = 64
VICTIM = 21  # batch 10 of 2 samples: worker 2 of 4 (torch hands batches out round robin)
VICTIM_WORKER = 2
HEALTHY = [i for i in range(N) if i != VICTIM]
RESPAWNED_LINE = "worker 2 respawned alone (pid {old} -> pid *); * owed batch* re-sent"
CAUSES = {
    "sigkill": "killed-by-signal",
    "segv": "native-crash",
    "exit": "worker-exit",
    "hang": "worker-hang",
}


class Counting(Dataset):
    """Each sample says who loaded it: its index, the worker's pid, how many samples that
    process has fetched so far, and the worker's ``torch.initial_seed()``. Sample ``victim``
    fails in a worker the way ``fault`` says (every sample in ``victims``)."""

    def __init__(self, fault: str, victims: tuple[int, ...] = (VICTIM,), n: int = N) -> None:
        self.fault, self.victims, self.n = fault, victims, n
        self.fetched = 0  # per process: each worker has its own copy

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, Any]:
        self.fetched += 1
        if index in self.victims and get_worker_info() is not None:
            fail(self.fault)
        time.sleep(0.002)
        return {
            "index": index,
            "pid": os.getpid(),
            "fetched": self.fetched,
            "seed": str(torch.initial_seed()),
        }


def fail(fault: str) -> None:
    if fault in ("sigkill", "segv", "exit"):
        quiet_result_queue()
    if fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "segv":
        ctypes.string_at(0)
    elif fault == "exit":
        os._exit(3)
    elif fault == "hang":
        time.sleep(600)
    elif fault in ("locked", "half-sent"):
        # Die mid-write, as a worker SIGKILLed while its feeder thread sends a batch does: the
        # result queue's writer lock stays held for ever and, once the first bytes went out,
        # half a message is in the pipe (here a header that promises 4096 bytes, then 16 of
        # them; reading it blocks for ever).
        frame: Any = sys._getframe()
        while frame is not None and frame.f_code.co_name != "_worker_loop":
            frame = frame.f_back
        data_queue = frame.f_locals["data_queue"]
        data_queue._wlock.acquire()
        if fault == "half-sent":
            os.write(data_queue._writer.fileno(), struct.pack("!i", 4096) + b"\x80" * 16)
            time.sleep(1.0)  # the main process is reading it (else it sees the death first)
        os.kill(os.getpid(), signal.SIGKILL)


def run_epochs(
    loader: loaderdoctor.DataLoader, epochs: int = 1
) -> tuple[list[list[dict]], list[int | None], Any]:
    """The samples of each epoch, the worker pids at the start, and the last epoch's iterator."""
    out: list[list[dict]] = []
    iterator: Any = None
    started: list[int | None] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        for _ in range(epochs):
            iterator = iter(loader)
            started = started or [process.pid for process in iterator._workers]
            samples: list[dict] = []
            for batch in iterator:
                samples.extend(
                    {key: batch[key][row] for key in batch} for row in range(len(batch["index"]))
                )
            out.append(samples)
    return out, started, iterator


def indices(samples: list[dict]) -> list[int]:
    return sorted(int(s["index"]) for s in samples)


def counters_by_pid(samples: list[dict]) -> dict[int, list[int]]:
    counters: dict[int, list[int]] = defaultdict(list)
    for sample in samples:
        counters[int(sample["pid"])].append(int(sample["fetched"]))
    return counters


def seeds_by_pid(samples: list[dict]) -> dict[int, set[str]]:
    seeds: dict[int, set[str]] = defaultdict(set)
    for sample in samples:
        seeds[int(sample["pid"])].add(sample["seed"])
    return seeds


def loader_for(
    fault: str, method: str | None = None, victims: tuple[int, ...] = (VICTIM,), **kwargs: Any
) -> loaderdoctor.DataLoader:
    return loaderdoctor.DataLoader(
        Counting(fault, victims),
        batch_size=2,
        num_workers=4,
        heal=True,
        hang_timeout=3,
        multiprocessing_context=method,
        **kwargs,
    )


@pytest.mark.parametrize(
    ("fault", "method"),
    [
        ("sigkill", None),
        ("segv", None),
        ("exit", None),
        # A pickled start once, under forkserver (Linux's default from Python 3.14): the
        # supervisor replaces a worker the same way under spawn, whose healing of a segfault
        # is test_portable's test_healing_under_spawn_finishes_the_epoch.
        pytest.param("sigkill", "forkserver", marks=pytest.mark.extended),
    ],
)
def test_one_dead_worker_of_four_is_replaced_alone(fault: str, method: str | None) -> None:
    loader = loader_for(fault, method)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        iterator = iter(loader)
        before = [process.pid for process in iterator._workers]
        samples = [
            {key: batch[key][row] for key in batch}
            for batch in iterator
            for row in range(len(batch["index"]))
        ]
    after = [process.pid for process in iterator._workers]

    # every healthy sample, exactly once, in torch's order
    assert [int(s["index"]) for s in samples] == HEALTHY
    report = loader.report
    assert [(i.diagnosis.cause, i.action, i.diagnosis.indices) for i in report.incidents] == [
        (CAUSES[fault], "quarantined", [VICTIM])
    ]
    assert report.quarantine == [VICTIM]
    evidence = report.incidents[0].diagnosis.evidence
    assert fnmatch.fnmatchcase(evidence[-1], RESPAWNED_LINE.format(old=before[VICTIM_WORKER]))
    # the other workers kept running, and only the dead one was replaced
    assert [pid for w, pid in enumerate(after) if w != VICTIM_WORKER] == [
        pid for w, pid in enumerate(before) if w != VICTIM_WORKER
    ]
    replacement = after[VICTIM_WORKER]
    assert replacement != before[VICTIM_WORKER]
    assert replacement in loader._ld.worker_pids  # `loaderdoctor run` counts workers from it
    # each surviving worker's per-process counter went on counting: it was never restarted
    counters = counters_by_pid(samples)
    for pid in after:
        assert sorted(counters[pid]) == list(range(1, len(counters[pid]) + 1)), pid
    # the replacement draws the dead worker's random streams (same worker_id, same base seed)
    seeds = seeds_by_pid(samples)
    assert seeds[replacement] == seeds[before[VICTIM_WORKER]]
    assert len(seeds[replacement]) == 1
    assert len({next(iter(seeds[pid])) for pid in after}) == 4


def test_a_hung_workers_sample_is_re_tried_with_the_pool_stopped() -> None:
    """A hang may be the sample's or the pool's (a slot the other workers hold): the sample is
    re-tried alone with the pool stopped, and stuck again it is quarantined; the pool restarts
    (the other workers' warm state is the price of telling the two apart)."""
    loader = loader_for("hang")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        iterator = iter(loader)
        before = [process.pid for process in iterator._workers]
        samples = [int(i) for batch in iterator for i in batch["index"]]
    assert samples == HEALTHY  # every healthy sample, exactly once, in torch's order
    report = loader.report
    assert [(i.diagnosis.cause, i.action, i.diagnosis.indices) for i in report.incidents] == [
        ("worker-hang", "quarantined", [VICTIM])
    ]
    assert report.quarantine == [VICTIM]
    assert report.incidents[0].diagnosis.evidence[0] == (
        f"re-tried alone in a fresh worker, sample {VICTIM} failed again: the failure follows "
        "the sample"
    )
    # a new pool of four besides the four it started with
    assert len(loader._ld.worker_pids - set(before)) == len(before)


def test_a_replaced_worker_persists_into_the_next_epoch() -> None:
    loader = loader_for(
        "segv", persistent_workers=True, shuffle=True, generator=torch.Generator().manual_seed(3)
    )
    epochs, started, iterator = run_epochs(loader, epochs=2)
    # each epoch in the order stock torch draws with the same generator, less the culprit
    stock = torch.utils.data.DataLoader(
        range(N),
        batch_size=2,
        num_workers=4,
        persistent_workers=True,
        shuffle=True,
        generator=torch.Generator().manual_seed(3),
    )
    for epoch in epochs:
        torch_order = [int(i) for batch in stock for i in batch if int(i) != VICTIM]
        assert [int(s["index"]) for s in epoch] == torch_order
    stock._iterator._shutdown_workers()
    assert [(i.diagnosis.cause, i.action) for i in loader.incidents] == [
        ("native-crash", "quarantined")
    ]
    # epoch 2 ran on the processes epoch 1 ended with: three it started with, one replacement
    pids_2 = set(counters_by_pid(epochs[1]))
    assert pids_2 == {process.pid for process in iterator._workers}
    assert len(pids_2 & set(started)) == 3
    assert all(process.is_alive() for process in iterator._workers)
    # and every worker's counter went on from epoch 1
    both = counters_by_pid(epochs[0] + epochs[1])
    for pid in pids_2:
        assert sorted(both[pid]) == list(range(1, len(both[pid]) + 1)), pid
    iterator._shutdown_workers()


def test_no_reference_cycle_after_a_single_respawn() -> None:
    """Workers stop by reference counting: a dropped iterator after a respawn is freed at once."""
    loader = loader_for("exit")
    gc.collect()
    gc.disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", HealWarning)
            iterator = iter(loader)
            for _ in iterator:
                if loader.incidents:
                    break  # the first batch after the respawn
            assert loader.incidents and loader.incidents[0].action == "quarantined"
        workers = list(iterator._workers)
        freed = weakref.ref(iterator)
        del iterator
        assert freed() is None, "the iterator is held in a reference cycle"
        deadline = time.monotonic() + 10
        while any(process.is_alive() for process in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(process.is_alive() for process in workers)
    finally:
        gc.enable()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("fault", "line"),
    [
        (
            "locked",
            "worker 2 died while writing to the shared result queue (its lock stayed held for "
            "5 s): the whole pool is rebuilt instead",
        ),
        (
            "half-sent",
            "worker 2 died in the middle of sending a batch (half a message is left in the "
            "shared result queue): the whole pool is rebuilt instead",
        ),
    ],
)
def test_a_worker_killed_mid_write_rebuilds_the_whole_pool(fault: str, line: str) -> None:
    loader = loader_for(fault)
    epochs, started, _ = run_epochs(loader)
    assert indices(epochs[0]) == HEALTHY
    # a fresh pool of four besides the four it started with (none respawned alone)
    assert set(started) < loader._ld.worker_pids and len(loader._ld.worker_pids) == 8
    incidents = loader.incidents
    assert [(i.diagnosis.cause, i.action) for i in incidents] == [
        ("killed-by-signal", "quarantined")
    ]
    assert incidents[0].diagnosis.evidence[-1] == line


def test_with_on_error_replace_the_replacement_knows_the_quarantine() -> None:
    """Only a worker finds a substitute: the replacement and the persistent workers that ran on
    learn the grown quarantine (the live table), and keep serving the next epoch."""
    loader = loader_for(
        "segv",
        on_error="replace",
        persistent_workers=True,
        shuffle=True,
        generator=torch.Generator().manual_seed(5),
    )
    epochs, started, iterator = run_epochs(loader, epochs=2)
    for epoch in epochs:
        delivered = Counter(int(s["index"]) for s in epoch)
        assert sum(delivered.values()) == N  # batches stay full
        assert VICTIM not in delivered and set(delivered) == set(HEALTHY)
        assert sorted(delivered.values()) == [1] * (N - 2) + [2]  # one substitute
    assert [(i.diagnosis.cause, i.action) for i in loader.incidents] == [
        ("native-crash", "quarantined")
    ]
    *_, respawned, substituted = loader.incidents[0].diagnosis.evidence
    assert fnmatch.fnmatchcase(respawned, RESPAWNED_LINE.format(old=started[VICTIM_WORKER]))
    # said once, for the first epoch's substitute (a duplicate the user asked for)
    [twice] = [i for i, n in Counter(int(s["index"]) for s in epochs[0]).items() if n == 2]
    assert substituted == (
        f"its place in a batch of epoch 0 was filled by sample {twice}, which so arrives twice"
    )
    # epoch 2: the same persistent workers (the replacement among them), none started afresh
    assert set(counters_by_pid(epochs[1])) <= set(counters_by_pid(epochs[0]))
    iterator._shutdown_workers()


def test_a_replacement_that_dies_too_is_diagnosed_and_replaced_in_turn() -> None:
    """The replacement runs the same start-up hooks as torch's workers: its own crash has the
    faulthandler stack and the sample, and it is replaced in turn."""
    second = 29  # batch 14: worker 2 again
    loader = loader_for("segv", victims=(VICTIM, second))
    epochs, started, iterator = run_epochs(loader)
    assert indices(epochs[0]) == [i for i in HEALTHY if i != second]
    incidents = loader.incidents
    assert [(i.diagnosis.cause, i.action, i.diagnosis.indices) for i in incidents] == [
        ("native-crash", "quarantined", [VICTIM]),
        ("native-crash", "quarantined", [second]),
    ]
    first_replacement = incidents[1].diagnosis.pid
    assert first_replacement not in started
    assert fnmatch.fnmatchcase(
        incidents[1].diagnosis.evidence[-1],
        f"worker 2 respawned alone (pid {first_replacement} -> pid *); * owed batch* re-sent",
    )
    for incident in incidents:
        assert incident.diagnosis.worker_id == VICTIM_WORKER
        assert "in __getitem__" in (incident.diagnosis.python_stack or "")
    assert [p for w, p in enumerate(started) if w != VICTIM_WORKER] == [
        process.pid for w, process in enumerate(iterator._workers) if w != VICTIM_WORKER
    ]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_a_replacement_learns_the_quarantine_that_its_predecessor_died_for(fault: str) -> None:
    """Sample 0 kills (or hangs) the worker that fetches it as a reference for a ragged batch:
    a worker fetches more than the main process sends it. After a hang the replacement starts
    beside the probe, before 0 is quarantined, and learns it through the live quarantine before
    it fetches its references (before, it died of 0 too, found by the ledger
    test). After a kill (a memory suspect) the replacement starts once the probe is done (the
    two together could take the training process), so it knows 0 from the start.
    Either way one incident for sample 0."""
    import tempfile

    from ld_datasets import Ledger

    flags = tempfile.mkdtemp(prefix="respawn-")
    loader = loaderdoctor.DataLoader(
        Ledger(6, {0: fault, 3: "ragged"}, flags),
        batch_size=3,
        sampler=[3, 4, 5, 0, 1, 2],
        num_workers=1,
        heal=True,
        hang_timeout=1.5,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        rows = [int(row[0]) for batch in loader for row in batch]
    assert rows == [4, 5, 1, 2]
    cause = "killed-by-signal" if fault == "kill" else "worker-hang"
    assert [(i.diagnosis.cause, i.action) for i in loader.incidents] == [
        (cause, "quarantined"),
        ("collate-error", "skipped"),
    ]
    assert loader.report.quarantine == [0, 3]  # the ragged one, skipped from its batch, too


class CrashOnce(Dataset):
    """Sample 1 crashes its worker (SIGSEGV) the first time only (a flag file remembers)."""

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 1 and get_worker_info() is not None and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            ctypes.string_at(0)
        return torch.tensor([index])


@pytest.mark.slow
def test_a_sample_that_loads_fine_alone_is_loaded_by_the_replacement(tmp_path) -> None:
    """A worker crashes once at sample 1: the probe loads it fine, and the replacement loads it."""
    loader = loaderdoctor.DataLoader(
        CrashOnce(str(tmp_path / "crashed")), batch_size=3, num_workers=2, heal=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        rows = [int(row[0]) for batch in loader for row in batch]
    assert rows == [0, 1, 2, 3, 4, 5]
    (incident,) = loader.incidents
    assert (incident.diagnosis.cause, incident.action) == ("native-crash", "respawned")
    evidence = incident.diagnosis.evidence
    assert "sample 1 loaded fine alone: not reproducible" in evidence
    alone = "worker 0 respawned alone (pid * -> pid *); * owed batch* re-sent"
    assert fnmatch.filter(evidence, alone)
    assert loader.report.quarantine == []
