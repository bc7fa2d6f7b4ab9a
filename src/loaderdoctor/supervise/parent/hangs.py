"""Hang detection, in one place: when a worker's stage counts as stuck, and how its stack is had.

A worker's flight-recorder row says which stage it is in (init, fetch, collate) and since when; the
parent's ``WorkerWatch`` asks ``stuck`` at each poll, and for a stuck worker ``dump_stack`` gets its
Python stack the way the worker said it could be had (``files.stack_dump_how``): a dump signal
that faulthandler answers in the worker's stack log, or, where the platform has none, the dump the
worker's own stage timer (``worker.hooks._StageTimer``, armed at ``TIMER_DUMP_FRACTION`` of the
timeout) wrote into its hang log. torch's own ``timeout=`` is a hang too (``timeout_message``).
"""

from __future__ import annotations

import os
import time

from loaderdoctor.recorder import WorkerSnapshot
from loaderdoctor.supervise import files
from loaderdoctor.supervise.worker.hooks import ORPHAN_GUARD_FRAME, STAGE_TIMER_FRAME

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
        with open(files.stack_dump_how(log_dir, worker_id, pid)) as handle:
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
    path = files.stack_log(log_dir, worker_id, pid)
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
    path = files.hang_log(log_dir, worker_id, pid)
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


# --- batches lost in transfer ---------------------------------------------------------


def _main_thread_first(dump: str) -> str:
    """A timer's dump lists the newest thread first and has no "Current thread": put the
    worker's main thread (the one in torch's ``_worker_loop``) first, and leave out the timer's
    own thread, as a signal's dump would."""
    threads = [block.strip() for block in dump.strip().split("\n\n") if block.strip()]
    threads = [block for block in threads if STAGE_TIMER_FRAME not in block]
    threads = [block for block in threads if ORPHAN_GUARD_FRAME not in block]
    threads.sort(key=lambda block: "in _worker_loop" not in block)
    return "\n\n".join(threads)


__all__ = [
    "STACK_DUMP_WAIT_S",
    "STUCK_STAGES",
    "TIMEOUT_PREFIX",
    "dump_stack",
    "stuck",
    "timeout_message",
]
