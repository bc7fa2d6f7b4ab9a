"""Reading the workers' shared result queue without ever blocking on half a message.

Every worker writes its batches into one ``multiprocessing.Queue``; its feeder thread writes a
message (a length, then the pickle) while it holds the queue's writer lock. A worker SIGKILLed in
the middle (the OOM killer does not wait) leaves the lock held for ever and the start of a message
in the pipe: ``Queue.get`` then reads the length and blocks for ever on bytes that never come
(stock torch escapes only because its SIGCHLD handler interrupts the read with an exception).
``receive`` reads the same framing as ``multiprocessing.connection.Connection.recv_bytes`` but,
whenever the pipe stalls mid-message, asks ``stalled()`` whether a worker has failed; if one has,
it raises ``HalfMessage`` with that evidence, and the queue is never read again (the pool is
rebuilt with a new one).
"""

from __future__ import annotations

import os
import queue
import select
import struct
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

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
    reader = result_queue._reader
    if not reader.poll(timeout):
        raise queue.Empty
    lock = result_queue._rlock
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


__all__ = ["STALL_CHECK_S", "HalfMessage", "receive"]
