"""The watch on each worker: notice a dead, stuck or mute one, and gather the evidence of what it did.

``WorkerWatch.poll()`` is called every ``POLL_S`` while the main process waits for a batch
(``WorkerWatch.wait``, the receive loop of torch's and torchdata's supervised iterators alike) and
returns ``Evidence`` of a failure, or None. A stuck worker's Python stack is dumped by faulthandler
before it is killed: on the signal the worker registered, or by the timer it armed where the
platform has no such signal (``system.platform.stack_dump``). Batches lost between a worker and the main process
(not sent: the worker's feeder thread failed; not received: the sender died, or a process ran out
of file descriptors) are told apart here too. The workers' shared result queue is read here
(``receive``) without ever blocking on half a message.
"""

from __future__ import annotations

import errno as errno_module
import os
import queue
import select
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any

from loaderdoctor import boundary, cpython_compat
from loaderdoctor.forensics import Diagnosis, Evidence
from loaderdoctor.recorder import FlightRecorder, WorkerSnapshot
from loaderdoctor.supervise.parent import collect
from loaderdoctor.supervise.parent.ledger import Ledger
from loaderdoctor.supervise.parent.pool import Pool
from loaderdoctor.supervise.parent.worker_exceptions import ERRNO_PATTERN, exception_line
from loaderdoctor.supervise.samples import sample_file, sample_shard
from loaderdoctor.system.limits import open_files, process_open_files
from loaderdoctor.torch_compat import IteratorBooks

# How often the main process looks at its workers while it waits for a batch. torch checks every
# MP_STATUS_CHECK_INTERVAL (5 s) and relies on a SIGCHLD handler for the rest.
POLL_S = 0.1
RECEIVE_ERROR_GRACE_S = 1.0


# multiprocessing's words when a descriptor sent over a Unix socket did not arrive
ANCDATA_LOST = "items of ancdata"


# --- the result queue -------------------------------------------------------------------
# Every worker writes its batches into one ``multiprocessing.Queue``; its feeder thread writes a
# message (a length, then the pickle) while it holds the queue's writer lock. A worker SIGKILLed in
# the middle (the OOM killer does not wait) leaves the lock held for ever and the start of a message
# in the pipe: ``Queue.get`` then reads the length and blocks for ever on bytes that never come
# (stock torch escapes only because its SIGCHLD handler interrupts the read with an exception).
# ``receive`` reads the same framing as ``multiprocessing.connection.Connection.recv_bytes`` but,
# whenever the pipe stalls mid-message, asks ``stalled()`` whether a worker has failed; if one has,
# it raises ``HalfMessage`` with that evidence, and the queue is never read again (the pool is
# rebuilt with a new one).

# How long the pipe may stay silent mid-message before the workers are looked at.
STALL_CHECK_S = 0.2


class HalfMessage(Exception):
    """The pipe holds the start of a message that will not be finished; ``evidence`` says why."""

    def __init__(self, evidence: Any) -> None:
        super().__init__("a worker failed in the middle of sending a batch")
        self.evidence = evidence


def receive(result_queue: Any, timeout: float, stalled: Callable[[], Any]) -> Any:
    """The next message of ``result_queue``, as ``result_queue.get(timeout=timeout)`` returns it.

    Raises ``queue.Empty`` after ``timeout`` without data, ``HalfMessage`` when the pipe stalls
    mid-message and ``stalled()`` returns evidence of a failed worker, ``EOFError`` when every
    writer is gone.
    """
    reader = cpython_compat.queue_reader(result_queue)
    if not reader.poll(timeout):
        raise queue.Empty
    lock = cpython_compat.queue_read_lock(result_queue)
    if not lock.acquire(timeout=timeout):
        raise queue.Empty
    try:
        fd = reader.fileno()
        (size,) = struct.unpack("!i", _read_exactly(fd, 4, stalled))
        if size == -1:  # a message over 2 GiB: the length follows in 8 bytes
            (size,) = struct.unpack("!Q", _read_exactly(fd, 8, stalled))
        payload = _read_exactly(fd, size, stalled)
    finally:
        lock.release()
    return ForkingPickler.loads(payload)


def _read_exactly(fd: int, size: int, stalled: Callable[[], Any]) -> bytes:
    # poll, not select: select() refuses any descriptor numbered 1024 or more, and a training
    # process holds thousands (torch's file_descriptor sharing keeps one per received tensor).
    readable = select.poll()
    readable.register(fd, select.POLLIN)
    data = bytearray()
    while len(data) < size:
        if not readable.poll(STALL_CHECK_S * 1000):
            evidence = stalled()
            if evidence is not None:
                raise HalfMessage(evidence)
            continue
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError("the result queue has no writers left")
        data += chunk
    return bytes(data)


# --- hangs: when a worker's stage counts as stuck, and how its stack is had ------------------
# A worker's flight-recorder row says which stage it is in (init, fetch, collate) and since when; the
# parent's ``WorkerWatch`` asks ``stuck`` at each poll, and for a stuck worker ``dump_stack`` gets its
# Python stack the way the worker said it could be had (``boundary.stack_dump_how``): a dump signal
# that faulthandler answers in the worker's stack log, or, where the platform has none, the dump the
# worker's own stage timer (``worker.hooks._StageTimer``, armed at ``TIMER_DUMP_FRACTION`` of the
# timeout) wrote into its hang log. torch's own ``timeout=`` is a hang too (``timeout_message``).
STACK_DUMP_WAIT_S = 1.0
STUCK_STAGES = ("fetch", "collate", "init")
TIMEOUT_PREFIX = "DataLoader timed out after"


def stuck(snapshot: WorkerSnapshot, hang_timeout: float) -> bool:
    """The worker has been in one stage of loading longer than ``hang_timeout`` seconds."""
    return snapshot.stage in STUCK_STAGES and snapshot.stage_age_s > hang_timeout


def timeout_message(timeout: float) -> str:
    """torch's own words when ``DataLoader(timeout=...)`` runs out (the user's first line)."""
    return f"{TIMEOUT_PREFIX} {timeout} seconds"


def dump_stack(log_dir: str, worker_id: int, pid: int | None) -> tuple[str | None, str | None]:
    """(the stuck worker's stack, how it was had) or (None, why not), as the worker said."""
    if pid is None:
        return None, "the worker's pid is unknown"
    try:
        with open(boundary.stack_dump_how(log_dir, worker_id, pid)) as handle:
            how, _, description = handle.read().partition("\n")
    except OSError:
        return None, "the worker did not say how (it never finished starting)"
    if how.startswith("signal "):
        return _dump_on_signal(log_dir, worker_id, pid, int(how.split()[1]))
    if how == "timer":
        return _read_timer_dump(log_dir, worker_id, pid, description.strip())
    return None, how.removeprefix("none: ")


def _dump_on_signal(
    log_dir: str, worker_id: int, pid: int, number: int
) -> tuple[str | None, str | None]:
    path = boundary.stack_log(log_dir, worker_id, pid)
    try:
        offset = os.path.getsize(path)
        os.kill(pid, number)
    except OSError as error:
        return None, f"signal {number} could not be sent ({error.strerror or error})"
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
            text = handle.read().strip()
    except OSError as error:
        return None, f"{path} could not be read ({error.strerror or error})"
    if text:
        return text, None
    return None, f"faulthandler wrote nothing within {STACK_DUMP_WAIT_S:.0f} s"


def _read_timer_dump(
    log_dir: str, worker_id: int, pid: int, description: str
) -> tuple[str | None, str | None]:
    """The last dump the worker's own timer wrote (``Timeout (0:00:02)!`` and the threads)."""
    path = boundary.hang_log(log_dir, worker_id, pid)
    deadline = time.monotonic() + STACK_DUMP_WAIT_S
    while True:
        try:
            with open(path, errors="replace") as handle:
                text = handle.read()
        except OSError as error:
            return None, f"{path} could not be read ({error.strerror or error})"
        marker = text.rfind("Timeout (")
        if marker >= 0:
            # the first line is the timer's own header, not part of the stack
            dump = _main_thread_first(text[marker:].split("\n", 1)[-1])
            if dump:
                return dump, description
        if time.monotonic() >= deadline:
            return None, f"{description} wrote nothing (a thread that never released the GIL?)"
        time.sleep(0.05)


def _main_thread_first(dump: str) -> str:
    """A timer's dump lists the newest thread first and has no "Current thread": put the
    worker's main thread (the one in torch's ``_worker_loop``) first, and leave out the timer's
    own thread, as a signal's dump would."""
    threads = [block.strip() for block in dump.strip().split("\n\n") if block.strip()]
    threads = [block for block in threads if boundary.STAGE_TIMER_FRAME not in block]
    threads = [block for block in threads if boundary.ORPHAN_GUARD_FRAME not in block]
    threads.sort(key=lambda block: "in _worker_loop" not in block)
    return "\n\n".join(threads)


class PoolFailure(Exception):
    """A worker failed: carries the evidence out of torch's ``_next_data`` loop (the only way out
    of torch's code) to the iterator, which hands it to ``Recovery.handle``."""

    def __init__(
        self,
        evidence: Evidence,
        error: BaseException | None = None,
        diagnosis: Diagnosis | None = None,
    ) -> None:
        super().__init__(evidence.kind)
        self.evidence = evidence
        self.error = error  # the worker's own exception, rebuilt (kind == "exception")
        self.diagnosis = diagnosis
        self.plan: Any = None  # decided already where it was found (``Recovery.plan``)


class WorkerWatch:
    def __init__(
        self,
        pool: Pool,
        recorder: FlightRecorder,
        ledger: Ledger,
        *,
        dataset: Any,
        start_method: str,
        iterable: bool,
        hang_timeout: float | None,
        epoch: int,
        parts: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self.pool = pool
        self.recorder = recorder
        self.ledger = ledger
        self.dataset = dataset
        self.start_method = start_method
        self.iterable = iterable
        self.hang_timeout = hang_timeout
        self.epoch = epoch
        self.parts = parts  # ("dataset", ...), ("collate_fn", ...): what a worker unpickles
        self.baseline = collect.read_baseline()

    # --- waiting for a batch -----------------------------------------------------------------
    def wait(self, books: IteratorBooks, timeout: float) -> tuple[bool, Any]:
        """torch's ``_try_get_data``, watched: ``(True, message)`` from the queue the main thread
        reads, ``(False, None)`` when ``timeout`` passes without one. Every ``POLL_S`` the
        workers are looked at; a failed one raises ``PoolFailure`` with its evidence. A half
        message left by a dead worker raises ``HalfMessage``: that queue is never read again,
        which the caller knows what to make of."""
        deadline = time.monotonic() + timeout
        direct = books.reads_result_queue  # else pin_memory's thread reads the results
        results = books.data_queue

        def stalled() -> Evidence | None:
            return self.poll(books.workers_status, books.task_info)

        while True:
            wait = min(POLL_S, max(0.0, deadline - time.monotonic()))
            receive_error: Exception | None = None
            try:
                if direct:
                    return (True, receive(results, wait, stalled))
                return (True, books.receive(wait))
            except queue.Empty:
                pass
            except HalfMessage:
                raise
            except Exception as error:  # unpickling a batch runs the user's classes: any error
                receive_error = error
            if receive_error is not None:
                # Outside the except block: the verdict must not arrive chained under the
                # EOFError/ConnectionResetError of the dead sender.
                try:
                    found = self.receive_error(receive_error, books.workers_status, books.task_info)
                    if found is None:
                        raise receive_error
                    raise PoolFailure(found)
                finally:
                    receive_error = None  # no reference cycle through its traceback
            evidence = stalled()
            if evidence is not None:
                raise PoolFailure(evidence)
            if time.monotonic() >= deadline:
                return (False, None)

    def timed_out(
        self, in_turn: tuple[Any, ...] | None, tasks: Mapping[int, Any], timeout: float
    ) -> Evidence:
        """The loader's own ``timeout`` passed without the batch whose turn it is (``in_turn``,
        its entry in torch's books): the worker that owes it hangs."""
        worker_id = in_turn[0] if in_turn else 0
        return self.hang(worker_id, tasks, timeout_message(timeout))

    # --- the poll -------------------------------------------------------------------------
    def poll(self, busy: Sequence[bool], tasks: Mapping[int, Any]) -> Evidence | None:
        """Evidence of the first worker found dead, unable to send, or stuck; else None."""
        for worker_id in range(len(self.pool)):
            if busy[worker_id] and not self.pool.is_alive(worker_id):
                if self.recorder.snapshot(worker_id).send_errors:
                    return self.send_error(worker_id, tasks)  # why it ended (``sharer_guard``)
                return self.death(worker_id, tasks)
        for worker_id in range(len(self.pool)):
            if self.recorder.snapshot(worker_id).send_errors:
                return self.send_error(worker_id, tasks)
        if self.hang_timeout:
            for worker_id in range(len(self.pool)):
                if not busy[worker_id]:
                    continue
                if stuck(self.recorder.snapshot(worker_id), self.hang_timeout):
                    return self.hang(worker_id, tasks, None)
        return None

    def base(self, kind: Any, worker_id: int) -> Evidence:
        return Evidence(
            kind=kind,
            worker_id=worker_id,
            pid=self.pool.pid(worker_id),
            start_method=self.start_method,
            epoch=self.epoch,
            sharing_strategy=collect.sharing_strategy(),
        )

    def batch_of(
        self, worker_id: int, index: Any, tasks: Mapping[int, Any]
    ) -> tuple[int | None, list[Any] | None]:
        """The outstanding batch of ``worker_id`` that holds ``index`` (else its oldest one)."""
        mine = sorted(t for t, info in tasks.items() if len(info) == 1 and info[0] == worker_id)
        for task in mine:
            indices = self.ledger.indices_of(task)
            if index is not None and isinstance(indices, list) and index in indices:
                return task, list(indices)
        if not mine:
            return None, None
        indices = self.ledger.indices_of(mine[0])
        return mine[0], (list(indices) if isinstance(indices, list) else None)

    def death(self, worker_id: int, tasks: Mapping[int, Any]) -> Evidence:
        ev = self.base("death", worker_id)
        ev.signal, ev.exit_code = self.pool.how_it_ended(worker_id)
        self._worker_facts(ev, worker_id, tasks)
        ev.python_stack = collect.read_stack_log(self.pool.log_dir, worker_id, ev.pid)
        ev.exit_frame = collect.exit_frame(ev.python_stack)
        if not ev.reached_worker_init:
            ev.bootstrap_marker = collect.read_bootstrap_markers(self.pool.log_dir)
            if self.start_method != "fork":
                ev.main_script, ev.main_guard_missing = collect.main_script_unguarded()
                ev.fileless_main_parts = collect.defined_in_fileless_main(self.parts)
        collect.add_machine_evidence(ev, self.baseline)
        return ev

    def _worker_facts(self, ev: Evidence, worker_id: int, tasks: Mapping[int, Any]) -> None:
        snapshot = self.recorder.snapshot(worker_id)
        collect.from_snapshot(ev, snapshot, self.iterable)
        held = ev.in_flight_index
        if held is None and snapshot is not None and snapshot.stage == "collate":
            # The last sample it loaded names the batch being collated, though no sample is in
            # flight: an older outstanding batch may be finished and waiting in the queue.
            held = snapshot.in_flight_index
        ev.batch, ev.batch_indices = self.batch_of(worker_id, held, tasks)
        if ev.in_flight_index is None and ev.batch_indices and len(ev.batch_indices) == 1:
            ev.in_flight_index = ev.batch_indices[0]
        # a stream item's file (its shard's URL) came with its name from the recorder
        ev.sample_file = sample_file(self.dataset, ev.in_flight_index) or ev.sample_file
        ev.sample_shard = sample_shard(self.dataset, ev.in_flight_index)

    def hang(
        self, worker_id: int, tasks: Mapping[int, Any], timeout_message: str | None
    ) -> Evidence:
        """Evidence of a stuck worker, with its Python stack; the worker is killed."""
        ev = self.base("hang", worker_id)
        self._worker_facts(ev, worker_id, tasks)
        ev.seconds_without_progress = self.recorder.snapshot(worker_id).stage_age_s
        if self.pool.is_alive(worker_id):
            ev.python_stack, how = dump_stack(self.pool.log_dir, worker_id, ev.pid)
            if ev.python_stack is None:
                ev.notes.append(f"the stuck worker's Python stack could not be dumped: {how}")
            elif how:
                ev.notes.append(f"the stuck worker's Python stack was dumped by {how}")
            self.pool.kill(worker_id)
        if timeout_message:
            ev.notes.append(timeout_message)
        return ev

    def send_error(self, worker_id: int, tasks: Mapping[int, Any]) -> Evidence:
        ev = self.base("exception", worker_id)
        ev.stage = "send"
        log = collect.read_stack_log(self.pool.log_dir, worker_id, ev.pid) or ""
        text = log.split(boundary.SEND_ERROR_HEADER, 1)[-1].strip()
        ev.traceback = text
        ev.exception_message = exception_line(text)
        ev.exception_type = ev.exception_message.split(":", 1)[0] or None
        match = ERRNO_PATTERN.search(ev.exception_message)
        if match:
            ev.errno = int(match.group(1))
        # What stock PyTorch does next depends on where the same failure strikes it (in the
        # worker's collate_fn, it raises; in the queue's feeder thread, it waits), which this
        # run cannot show: the evidence says what happened here only.
        if boundary.SHARER_FAILED in text:
            ev.notes.append(
                f"worker {worker_id} finished a batch but {boundary.SHARER_FAILED}, and exited"
                " (its exit ended the main process's wait)"
            )
        else:
            ev.notes.append(
                f"worker {worker_id} finished a batch but its queue's feeder thread could not"
                " send it to the main process"
            )
        where = next(
            (ln for ln in log.splitlines() if ln.startswith(boundary.UNPICKLABLE_PREFIX)), None
        )
        if where is not None:
            path, _, kind = where[len(boundary.UNPICKLABLE_PREFIX) :].rpartition(" (")
            ev.unpicklable_path, ev.unpicklable_type = path, kind.rstrip(")")
        if ev.errno == errno_module.EMFILE and ev.pid:
            usage = process_open_files(ev.pid)
            if usage:
                ev.open_files_limit = usage[1]
                ev.notes.append(
                    f"worker {worker_id} has {usage[0]} open files, its limit is {usage[1]}"
                )
        # torch's own shared-memory error says "(28)", not "[Errno 28]"
        if ev.errno == errno_module.ENOSPC or "No space left on device" in ev.exception_message:
            collect.add_machine_evidence(ev, None)
        return ev

    def receive_error(
        self, error: Exception, busy: Sequence[bool], tasks: Mapping[int, Any]
    ) -> Evidence | None:
        """A batch could not be received: evidence of why, or None when nothing explains it."""
        if isinstance(error, OSError) and error.errno == errno_module.EMFILE:
            return self.poll(busy, tasks) or self._main_process_out_of_files(error)
        # A killed process closes its sockets before it becomes reapable, so the parent can see
        # the connection reset (the tensor's file descriptor was to come from the dead worker's
        # resource-sharer thread) a moment before ``is_alive()`` turns false. Give it that moment.
        deadline = time.monotonic() + RECEIVE_ERROR_GRACE_S
        while True:
            found = self.poll(busy, tasks)
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        return self._descriptors_exhausted(error)

    def _descriptors_exhausted(self, error: Exception) -> Evidence | None:
        """Name the process that ran out of descriptors, if any.

        With the ``file_descriptor`` sharing strategy each tensor crosses as a descriptor served
        by the sender's resource-sharer thread; when the worker is at its RLIMIT_NOFILE the
        parent only sees EOFError or ConnectionRefusedError (PyTorch issues #11201, #973).
        """
        exhausted: list[tuple[int | None, int, int, int]] = []
        for worker_id in range(len(self.pool)):
            pid = self.pool.pid(worker_id)
            usage = process_open_files(pid) if pid else None
            if pid and usage and usage[0] >= usage[1] * 0.95:
                exhausted.append((worker_id, pid, *usage))
        usage = process_open_files(os.getpid())
        if usage and usage[0] >= usage[1] * 0.95:
            exhausted.append((None, os.getpid(), *usage))
        if not exhausted and ANCDATA_LOST in str(error):
            # recvmsg() truncated the descriptor the worker sent (MSG_CTRUNC): this process had
            # no room for it then, though receiving may have freed some since.
            return self._main_process_out_of_files(error)
        if not exhausted:
            return None
        first_worker = exhausted[0][0]
        ev = (
            self.base("exception", first_worker)
            if first_worker is not None
            else Evidence(kind="exception", pid=os.getpid(), epoch=self.epoch)
        )
        ev.start_method = self.start_method
        ev.errno = errno_module.EMFILE
        ev.notes.append(f"the main process got {type(error).__name__} receiving a batch")
        ev.open_files_limit = exhausted[0][3]
        ev.sharing_strategy = collect.sharing_strategy()
        for wid, pid, count, limit in exhausted:
            who = "the main process" if wid is None else f"worker {wid}"
            ev.notes.append(f"{who} (pid {pid}) has {count} open files, its limit is {limit}")
        ev.notes.append("receiving a batch failed: the sender could not pass file descriptors")
        return ev

    def _main_process_out_of_files(self, error: Exception) -> Evidence:
        ev = Evidence(
            kind="exception",
            pid=os.getpid(),
            start_method=self.start_method,
            epoch=self.epoch,
            exception_type=type(error).__name__,
            exception_message=str(error),
            errno=errno_module.EMFILE,
            sharing_strategy=collect.sharing_strategy(),
        )
        files = open_files()
        if files.soft_limit is not None:
            ev.open_files_limit = files.soft_limit
            ev.notes.append(f"open-file limit of the main process: {ev.open_files_limit}")
        elif files.note:
            ev.notes.append(f"open-file limit of the main process unknown: {files.note}")
        ev.notes.append("the main process ran out of file descriptors receiving a batch")
        return ev


__all__ = [
    "POLL_S",
    "RECEIVE_ERROR_GRACE_S",
    "STACK_DUMP_WAIT_S",
    "STALL_CHECK_S",
    "STUCK_STAGES",
    "TIMEOUT_PREFIX",
    "HalfMessage",
    "WorkerWatch",
    "dump_stack",
    "receive",
    "stuck",
    "timeout_message",
]
