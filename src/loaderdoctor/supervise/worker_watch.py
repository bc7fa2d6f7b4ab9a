"""The watch on each worker: notice a dead or stuck one, and gather the evidence of what it did.

The main process polls every ``POLL_S`` while it waits for a batch; a stuck worker's Python stack is
dumped by faulthandler (``STACK_DUMP_SIGNAL``) before it is killed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from loaderdoctor.forensics import Evidence
from loaderdoctor.supervise import collect
from loaderdoctor.supervise.samples import sample_file
from loaderdoctor.supervise.worker_hooks import STACK_DUMP_SIGNAL

if TYPE_CHECKING:
    from loaderdoctor.supervise.loader import DataLoader

STACK_DUMP_WAIT_S = 1.0


class WorkerWatchMixin:
    """For SupervisedMultiProcessingIter: the poll, the hang watchdog, and death evidence."""

    _workers: Any
    _workers_status: Any
    _task_info: Any
    _ld_loader: DataLoader
    _ld_batch_indices: dict[int, Any]
    _ld_log_dir: str
    _ld_iterable: bool
    _ld_start_method: str
    _ld_recorder: Any
    _ld_epoch: int
    _ld_hang_timeout: float | None
    _ld_baseline: Any
    _ld_fail: Callable[[Evidence], NoReturn]
    _ld_send_error_evidence: Callable[[int], Evidence]

    def _ld_check_workers(self) -> None:
        for worker_id, process in enumerate(self._workers):
            if self._workers_status[worker_id] and not process.is_alive():
                self._ld_fail(self._ld_death_evidence(worker_id))
        for worker_id in range(len(self._workers)):
            if self._ld_recorder.snapshot(worker_id).send_errors:
                self._ld_fail(self._ld_send_error_evidence(worker_id))
        if self._ld_hang_timeout:
            for worker_id in range(len(self._workers)):
                if not self._workers_status[worker_id]:
                    continue
                snapshot = self._ld_recorder.snapshot(worker_id)
                busy = snapshot.stage in ("fetch", "collate", "init")
                if busy and snapshot.stage_age_s > self._ld_hang_timeout:
                    self._ld_hang(worker_id, None)

    def _ld_base_evidence(self, kind: Any, worker_id: int) -> Evidence:
        process = self._workers[worker_id]
        return Evidence(
            kind=kind,
            worker_id=worker_id,
            pid=process.pid,
            start_method=self._ld_start_method,
            epoch=self._ld_epoch,
        )

    def _ld_batch_of(self, worker_id: int, index: Any) -> tuple[int | None, list[Any] | None]:
        """The outstanding batch of ``worker_id`` that holds ``index`` (else its oldest one)."""
        mine = sorted(
            task
            for task, info in self._task_info.items()
            if len(info) == 1 and info[0] == worker_id
        )
        for task in mine:
            indices = self._ld_batch_indices.get(task)
            if index is not None and isinstance(indices, list) and index in indices:
                return task, list(indices)
        if not mine:
            return None, None
        indices = self._ld_batch_indices.get(mine[0])
        return mine[0], (list(indices) if isinstance(indices, list) else None)

    def _ld_death_evidence(self, worker_id: int) -> Evidence:
        process = self._workers[worker_id]
        ev = self._ld_base_evidence("death", worker_id)
        code = process.exitcode
        if code is not None and code < 0:
            ev.signal = collect.signal_name(-code)
        else:
            ev.exit_code = code
        self._ld_fill_worker_facts(ev, worker_id)
        ev.python_stack = collect.read_stack_log(self._ld_log_dir, worker_id, process.pid)
        if not ev.reached_worker_init:
            ev.bootstrap_marker = collect.read_bootstrap_markers(self._ld_log_dir)
            if self._ld_start_method != "fork":
                ev.main_script, ev.main_guard_missing = collect.main_script_unguarded()
        collect.add_machine_evidence(ev, self._ld_baseline)
        return ev

    def _ld_fill_worker_facts(self, ev: Evidence, worker_id: int) -> None:
        snapshot = self._ld_recorder.snapshot(worker_id)
        collect.from_snapshot(ev, snapshot, self._ld_iterable)
        ev.batch, ev.batch_indices = self._ld_batch_of(worker_id, ev.in_flight_index)
        if ev.in_flight_index is None and ev.batch_indices and len(ev.batch_indices) == 1:
            ev.in_flight_index = ev.batch_indices[0]
        ev.sample_file = sample_file(self._ld_loader.dataset, ev.in_flight_index)

    def _ld_hang(self, worker_id: int, timeout_message: str | None) -> NoReturn:
        process = self._workers[worker_id]
        ev = self._ld_base_evidence("hang", worker_id)
        self._ld_fill_worker_facts(ev, worker_id)
        ev.seconds_without_progress = self._ld_recorder.snapshot(worker_id).stage_age_s
        if process.is_alive():
            ev.python_stack = self._ld_dump_stack(worker_id, process.pid)
            process.kill()
            process.join(timeout=5)
        if timeout_message:
            ev.notes.append(timeout_message)
        self._ld_fail(ev)

    def _ld_dump_stack(self, worker_id: int, pid: int | None) -> str | None:
        if pid is None:
            return None
        path = os.path.join(self._ld_log_dir, f"worker-{worker_id}-{pid}.log")
        try:
            offset = os.path.getsize(path)
            os.kill(pid, STACK_DUMP_SIGNAL)
        except OSError:
            return None
        deadline = time.monotonic() + STACK_DUMP_WAIT_S
        size = offset
        while time.monotonic() < deadline:
            time.sleep(0.05)
            new_size = os.path.getsize(path)
            if new_size > offset and new_size == size:
                break  # it grew and stopped growing: the dump is complete
            size = new_size
        try:
            with open(path, errors="replace") as handle:
                handle.seek(offset)
                return handle.read().strip() or None
        except OSError:
            return None
