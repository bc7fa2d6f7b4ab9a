"""The worker processes of one supervised iterator: liveness, a fast stop, what dead ones leave.

torch's iterator starts the processes (so a clean run takes torch's own code path); the ``Pool``
owns them from then on: the supervisor asks it who is alive and how a worker ended, and it stops
them. Each worker is addressed by its ``worker_id``, so that replacing one worker (rather than the
whole pool) is a method on this object, not a change to its callers.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from typing import Any

from loaderdoctor import boundary, torch_compat
from loaderdoctor.system.oom_priority import raise_oom_score
from loaderdoctor.system.zombie import signal_name

SHUTDOWN_GRACE_S = 2.0


class Pool:
    def __init__(self, lists: torch_compat.WorkerLists, log_dir: str):
        self.lists = lists  # torch's own, written only through torch_compat
        self.log_dir = log_dir
        self.owner_pid = os.getpid()
        self.oom_score_adj: int | None = None  # set by ``first_for_oom_killer``
        self.oom_notes: list[str] = []  # why a worker's value could not be raised

    def first_for_oom_killer(self, value: int) -> None:
        """Make every worker, and each replacement from now on, the OOM killer's choice before
        the training process (``system.oom_priority``)."""
        self.oom_score_adj = value
        for process in self.lists.processes:
            self._rank_for_oom_killer(process.pid)

    def _rank_for_oom_killer(self, pid: int | None) -> None:
        if self.oom_score_adj is None or pid is None:
            return
        why_not = raise_oom_score(pid, self.oom_score_adj)
        if why_not is not None:
            self.oom_notes.append(why_not)

    def __len__(self) -> int:
        return len(self.lists.processes)

    def owned_here(self) -> bool:
        """False in a forked child that inherited this object: its workers are not its children."""
        return os.getpid() == self.owner_pid

    def pid(self, worker_id: int) -> int | None:
        return self.lists.processes[worker_id].pid

    def pids(self) -> set[int]:
        return {process.pid for process in self.lists.processes if process.pid}

    def is_alive(self, worker_id: int) -> bool:
        return bool(self.lists.processes[worker_id].is_alive())

    def how_it_ended(self, worker_id: int) -> tuple[str | None, int | None]:
        """(signal name, None) for a killed worker, (None, exit code) for one that exited."""
        code = self.lists.processes[worker_id].exitcode
        if code is not None and code < 0:
            return signal_name(-code), None
        return None, code

    def kill(self, worker_id: int) -> None:
        process = self.lists.processes[worker_id]
        if process.is_alive():
            process.kill()
        process.join(timeout=5)

    def respawn(
        self, worker_id: int, context: Any, make_args: Callable[[Any], tuple[Any, ...]]
    ) -> tuple[int | None, int | None]:
        """Replace worker ``worker_id`` (dead, or killed here) by a new process with its id.

        The new process runs torch's own ``_worker_loop`` with ``make_args(index_queue)`` (see
        ``torch_compat.worker_loop_args``) on a new index queue; the lists torch's iterator keeps
        are updated in place, so every other worker keeps running untouched. Returns
        ``(old pid, new pid)``.
        """
        old = self.lists.processes[worker_id]
        old_pid = old.pid
        self.kill(worker_id)
        old_queue = self.lists.index_queues[worker_id]
        old_queue.cancel_join_thread()
        old_queue.close()
        index_queue = context.Queue()
        index_queue.cancel_join_thread()  # as torch does: a dead reader must not block exit
        # In place before the start: should it fail, torch's shutdown still finds an open queue.
        self.lists.put_index_queue(worker_id, index_queue)
        process = context.Process(target=torch_compat.WORKER_LOOP, args=make_args(index_queue))
        process.daemon = True
        process.start()
        self._rank_for_oom_killer(process.pid)
        self.lists.put_process(worker_id, process)
        if old_pid is not None:
            self.remove_temp_dirs(old_pid)  # the others' are in use (their fd-passing sockets)
        return old_pid, process.pid

    def index_queue(self, worker_id: int) -> Any:
        return self.lists.index_queues[worker_id]

    def stop(self, busy: list[bool], grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Stop every worker within ``grace_s``, healthy ones cleanly, stuck ones by force.

        torch's own shutdown joins each worker with a 5 s timeout in turn; a worker blocked on a
        lock that a dead worker held (the result queue's) would cost 5 s each.
        """
        if not self.owned_here():
            return
        self.lists.done_event.set()
        for worker_id, index_queue in enumerate(self.lists.index_queues):
            if worker_id < len(busy) and busy[worker_id]:
                try:
                    index_queue.put(None)
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + grace_s
        for process in self.lists.processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self.lists.processes:
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        self.remove_temp_dirs()

    def remove_temp_dirs(self, pid: int | None = None) -> None:
        """A killed worker leaves its multiprocessing temp dir behind; remove those that remain
        (of every worker, or of the worker ``pid`` alone)."""
        try:
            names = boundary.names_of(
                self.log_dir, boundary.TEMPDIR_PREFIX, boundary.tempdir_suffix(pid)
            )
        except OSError:
            return
        for name in names:
            try:
                with open(os.path.join(self.log_dir, name)) as handle:
                    temp_dir = handle.read().strip()
            except OSError:
                continue
            if os.path.basename(temp_dir).startswith("pymp-"):
                shutil.rmtree(temp_dir, ignore_errors=True)


def kill_all(processes: list[Any]) -> None:
    """Workers that did start when the pool as a whole could not: kill and reap them."""
    for process in processes:
        if process.is_alive():
            process.kill()
        process.join(timeout=5)


__all__ = ["SHUTDOWN_GRACE_S", "Pool", "kill_all"]
