"""Replacing one dead worker of a supervised multiprocessing iterator, the others running on.

Functions of the iterator (``it``, a ``SupervisedMultiProcessingIter``), which calls them from
its decision point; they hold no reference to it. The new process takes the dead one's
``worker_id`` and is started as torch starts one (``torch_compat.worker_loop_args``, same base
seed), on a new index queue; the batches the dead worker owed are re-sent to it, in order. The
shared result queue is first settled under its writer lock, or found unusable (a worker killed
mid-write), and then the caller rebuilds the whole pool instead (issue 14).
"""

from __future__ import annotations

import functools
import queue
from dataclasses import dataclass
from typing import Any

from loaderdoctor import torch_compat
from loaderdoctor.supervise.loader_view import wrap_dataset
from loaderdoctor.supervise.sample_policy import SkippedBatch
from loaderdoctor.supervise.worker import SupervisedBatchedMapDataset

# How long a respawn waits for the result queue's writer lock before it calls the queue poisoned
# (held by a worker killed mid-write); a healthy writer holds it for one batch's write.
RESULT_LOCK_WAIT_S = 5.0
MAX_SETTLED_RESULTS = 100_000


@dataclass(frozen=True)
class Replacement:
    """A dead worker's replacement, started (``new_pid``) or refused (why, in ``refused``)."""

    worker_id: int
    old_pid: int | None = None
    new_pid: int | None = None
    refused: str = ""


def without_new_quarantine(it: Any, index: Any) -> tuple[Any, int]:
    """(the batch without samples quarantined since this pool started, or None when none is
    left; how many were left out). The caller counts them when the batch is delivered."""
    if it._ld_replacing:
        return index, 0  # the workers know the quarantine (``refresh_workers``)
    fresh = set(list(it._ld_sup.quarantine)[it._ld_quarantine_known :])
    if not isinstance(index, list):
        return (None, 1) if index in fresh else (index, 0)
    bad = [i for i in index if i in fresh]
    if not bad:
        return index, 0
    # short, drop_last or not, as the worker's wrapper leaves it: its healthy samples arrive
    if len(bad) == len(index):
        return None, len(bad)
    return [i for i in index if i not in fresh], len(bad)


def replace(
    it: Any, worker_id: int, worker_init_fn: Any = None, dataset: Any = None
) -> Replacement:
    """Start a new process in place of the dead worker ``worker_id``; the others run on.

    First every complete batch is taken off the result queue into torch's reorder buffer,
    under the queue's writer lock: a worker killed while writing holds that lock for ever
    (and may have left half a message in the pipe); the replacement is then refused and the
    caller rebuilds the whole pool. ``worker_init_fn`` replaces the pool's own (a per-worker
    resume). The owed batches are re-sent by ``resend_owed`` once the policy has
    decided (a probe may quarantine the sample in flight meanwhile).
    """
    if it._ld_queue_poisoned:
        return Replacement(
            worker_id,
            refused=(
                f"worker {worker_id} died in the middle of sending a batch (half a message "
                "is left in the shared result queue): the whole pool is rebuilt instead"
            ),
        )
    refused = settle_results(it, worker_id)
    if refused:
        return Replacement(worker_id, refused=refused)
    it._ld_recorder.reset_slot(worker_id)
    try:
        old_pid, new_pid = it._ld_pool.respawn(
            worker_id,
            it._ld_context,
            functools.partial(
                torch_compat.worker_loop_args,
                it,
                worker_id,
                dataset=dataset,
                worker_init_fn=worker_init_fn,
            ),
        )
    except Exception as error:  # the start itself failed: a fresh pool reports it
        return Replacement(
            worker_id,
            refused=(
                f"worker {worker_id} could not be respawned alone ({type(error).__name__}: "
                f"{error}): the whole pool is rebuilt instead"
            ),
        )
    if new_pid is not None:
        it._ld_sup.worker_pids.add(new_pid)
    it._workers_status[worker_id] = True
    if dataset is not None:  # a new view: does its recorder name the sample or the batch?
        if isinstance(dataset, SupervisedBatchedMapDataset):
            it._ld_batched_workers.add(worker_id)
        else:
            it._ld_batched_workers.discard(worker_id)
    return Replacement(worker_id, old_pid, new_pid)


def current_dataset(it: Any) -> Any:
    """The user's dataset wrapped with the sample policy as it is now (the quarantine)."""
    snapshot = it._ld_snapshot
    policy = it._ld_sup.sample_policy(it._drop_last)
    return wrap_dataset(snapshot.dataset, snapshot._dataset_kind, policy)


def refresh_workers(it: Any) -> None:
    """Replace every (idle, persistent) worker by one that knows the grown quarantine.

    Only with on_error="replace", at the start of the epoch after a death's culprit was
    quarantined: otherwise the main process leaves such samples out and the workers run on.
    """
    dataset = current_dataset(it)
    for worker_id in range(it._num_workers):
        it._ld_recorder.reset_slot(worker_id)
        _, new_pid = it._ld_pool.respawn(
            worker_id,
            it._ld_context,
            functools.partial(torch_compat.worker_loop_args, it, worker_id, dataset=dataset),
        )
        if new_pid is not None:
            it._ld_sup.worker_pids.add(new_pid)
    it._ld_quarantine_known = len(it._ld_sup.quarantine)
    it._ld_quarantined_a_death = False
    batched = isinstance(dataset, SupervisedBatchedMapDataset)
    it._ld_batched_workers = set(range(it._num_workers)) if batched else set()


def resend_owed(it: Any, replacement: Replacement) -> str:
    """Send the replacement the batches its predecessor owed, in order; the evidence line.

    A sample quarantined since the pool started (the one in flight, just now) is left out
    here: the workers' dataset wrapper does not know it.
    """
    worker_id = replacement.worker_id
    owed = sorted(
        task for task, info in it._task_info.items() if info[0] == worker_id and len(info) == 1
    )
    index_queue = it._ld_pool.index_queue(worker_id)
    ledger = it._ld_ledger
    for task in owed:
        batch, bad = without_new_quarantine(it, ledger.indices_of(task))
        skipped = ledger.skipped_of(task) + bad
        if batch is None:  # nothing of it is left to load: it is skipped here, in its turn
            it._task_info[task] = (worker_id, SkippedBatch([], "quarantined"))
            it._tasks_outstanding -= 1
            ledger.owe(task, [], skipped)
            continue
        ledger.owe(task, batch, skipped)
        index_queue.put((task, batch))
    it._workers_num_tasks[worker_id] = sum(
        1 for info in it._task_info.values() if info[0] == worker_id
    )
    it._ld_respawns += 1
    it._ld_sup.counts["resent_batches"] += len(owed)
    return (
        f"worker {worker_id} respawned alone (pid {replacement.old_pid} -> pid "
        f"{replacement.new_pid}); {len(owed)} owed batch{'' if len(owed) == 1 else 'es'} "
        "re-sent"
    )


def settle_results(it: Any, worker_id: int) -> str:
    """Move every complete batch on the result queue into torch's reorder buffer; "" when
    done, else why the whole pool must be rebuilt instead.

    Only while holding the writers' lock: then no message is half-written. Reading without
    it could start on the half message a worker killed mid-write left in the pipe and block
    for ever. The lock not had within ``RESULT_LOCK_WAIT_S`` means a worker died holding it
    (a healthy writer blocked on a full pipe ends up there too, safely).
    """
    lock = torch_compat.result_queue_writer_lock(it)
    if lock is not None and not lock.acquire(timeout=RESULT_LOCK_WAIT_S):
        return (
            f"worker {worker_id} died while writing to the shared result queue (its lock "
            f"stayed held for {RESULT_LOCK_WAIT_S:.0f} s): the whole pool is rebuilt instead"
        )
    try:
        unreadable = take_ready_results(it)
    finally:
        if lock is not None:
            lock.release()
    if unreadable:
        return (
            f"a batch on the shared result queue could not be read ({unreadable}): the whole "
            "pool is rebuilt instead"
        )
    return ""


def take_ready_results(it: Any) -> str:
    """Buffer every message on the result queue; what could not be read and not be blamed on
    the dead worker ("" when nothing), so that the caller rebuilds the whole pool instead."""
    results = it._worker_result_queue
    for _ in range(MAX_SETTLED_RESULTS):
        try:
            task, data = results.get(block=False)
        except queue.Empty:
            return ""
        except (ConnectionError, EOFError, FileNotFoundError):
            # A batch of the dead worker whose tensors cannot be had any more (their file
            # descriptors were to come from its resource sharer): still owed, and re-sent.
            continue
        except Exception as error:  # whose batch it was is unknown: nothing can be re-sent
            return f"{type(error).__name__}: {error}"
        if isinstance(data, torch_compat.IterableDatasetStopIteration):
            # A stream's end, taken as torch's _next_data takes it (no new task is put here:
            # the dead worker's queue is about to be replaced; the next batch puts one).
            it._tasks_outstanding -= 1
            if it._persistent_workers:
                it._workers_status[data.worker_id] = False
            else:
                it._mark_worker_as_unavailable(data.worker_id)
            continue
        info = it._task_info.get(task) if isinstance(task, int) else None
        if info is not None and len(info) == 1:
            it._task_info[task] = (info[0], data)
            it._tasks_outstanding -= 1
    return ""


__all__ = [
    "MAX_SETTLED_RESULTS",
    "RESULT_LOCK_WAIT_S",
    "Replacement",
    "current_dataset",
    "refresh_workers",
    "replace",
    "resend_owed",
    "settle_results",
    "take_ready_results",
    "without_new_quarantine",
]
