"""Batches lost between a worker and the main process: not sent (the worker's feeder thread
failed) or not received (the sender died, or a process ran out of file descriptors).
"""

from __future__ import annotations

import errno as errno_module
import os
import time
from collections.abc import Callable
from typing import Any, NoReturn

from loaderdoctor.forensics import Evidence
from loaderdoctor.supervise import collect
from loaderdoctor.supervise.worker_exceptions import ERRNO_PATTERN, _exception_line
from loaderdoctor.supervise.worker_hooks import SEND_ERROR_HEADER
from loaderdoctor.system.limits import process_open_files

RECEIVE_ERROR_GRACE_S = 1.0


class LostBatchMixin:
    """For SupervisedMultiProcessingIter: a batch that could not be sent or received."""

    _workers: Any
    _ld_log_dir: str
    _ld_start_method: str
    _ld_epoch: int
    _ld_base_evidence: Callable[[Any, int], Evidence]
    _ld_check_workers: Callable[[], None]
    _ld_fail: Callable[[Evidence], NoReturn]

    def _ld_send_error_evidence(self, worker_id: int) -> Evidence:
        process = self._workers[worker_id]
        ev = self._ld_base_evidence("exception", worker_id)
        ev.stage = "send"
        log = collect.read_stack_log(self._ld_log_dir, worker_id, process.pid) or ""
        text = log.split(SEND_ERROR_HEADER, 1)[-1].strip()
        ev.traceback = text
        ev.exception_message = _exception_line(text)
        ev.exception_type = ev.exception_message.split(":", 1)[0] or None
        match = ERRNO_PATTERN.search(ev.exception_message)
        if match:
            ev.errno = int(match.group(1))
        ev.notes.append(
            f"worker {worker_id} finished a batch but could not send it to the main process; "
            "stock PyTorch waits for that batch forever"
        )
        if ev.errno == errno_module.EMFILE and process.pid:
            usage = process_open_files(process.pid)
            if usage:
                ev.notes.append(
                    f"worker {worker_id} has {usage[0]} open files, its limit is {usage[1]}"
                )
        if ev.errno == errno_module.ENOSPC:
            collect.add_machine_evidence(ev, None)
        return ev

    def _ld_on_receive_error(self, error: Exception) -> NoReturn:
        if isinstance(error, OSError) and error.errno == errno_module.EMFILE:
            self._ld_check_workers()
            self._ld_fail_main_process(error)
        self._ld_wait_for_dead_sender()
        self._ld_fail_transfer(error)
        raise error

    def _ld_wait_for_dead_sender(self) -> None:
        """A batch that cannot be received usually means its sender just died.

        A killed process closes its sockets before it becomes reapable, so the parent can see the
        connection reset (the tensor's file descriptor was to come from the dead worker's
        resource-sharer thread) a moment before ``is_alive()`` turns false. Give it that moment.
        """
        deadline = time.monotonic() + RECEIVE_ERROR_GRACE_S
        while True:
            self._ld_check_workers()
            if time.monotonic() >= deadline:
                return
            time.sleep(0.02)

    def _ld_fail_transfer(self, error: Exception) -> None:
        """A batch could not be received. Name the process that ran out of descriptors, if any.

        With the ``file_descriptor`` sharing strategy each tensor crosses as a descriptor served
        by the sender's resource-sharer thread; when the worker is at its RLIMIT_NOFILE the
        parent only sees EOFError or ConnectionRefusedError (PyTorch issues #11201, #973).
        """
        exhausted: list[tuple[int | None, int, int, int]] = []
        for worker_id, process in enumerate(self._workers):
            usage = process_open_files(process.pid) if process.pid else None
            if process.pid and usage and usage[0] >= usage[1] * 0.95:
                exhausted.append((worker_id, process.pid, *usage))
        usage = process_open_files(os.getpid())
        if usage and usage[0] >= usage[1] * 0.95:
            exhausted.append((None, os.getpid(), *usage))
        if not exhausted:
            return
        first_worker = exhausted[0][0]
        ev = (
            self._ld_base_evidence("exception", first_worker)
            if first_worker is not None
            else Evidence(kind="exception", pid=os.getpid(), epoch=self._ld_epoch)
        )
        ev.start_method = self._ld_start_method
        ev.errno = errno_module.EMFILE
        ev.notes.append(f"the main process got {type(error).__name__} receiving a batch")
        for wid, pid, count, limit in exhausted:
            who = "the main process" if wid is None else f"worker {wid}"
            ev.notes.append(f"{who} (pid {pid}) has {count} open files, its limit is {limit}")
        ev.notes.append("receiving a batch failed: the sender could not pass file descriptors")
        self._ld_fail(ev)

    def _ld_fail_main_process(self, error: OSError) -> NoReturn:
        ev = Evidence(
            kind="exception",
            pid=os.getpid(),
            start_method=self._ld_start_method,
            epoch=self._ld_epoch,
            exception_type=type(error).__name__,
            exception_message=str(error),
            errno=error.errno,
        )
        try:
            import resource

            ev.open_files_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            ev.notes.append(f"open-file limit of the main process: {ev.open_files_limit}")
        except (ImportError, OSError, ValueError):
            pass
        ev.notes.append("the main process ran out of file descriptors receiving a batch")
        self._ld_fail(ev)
