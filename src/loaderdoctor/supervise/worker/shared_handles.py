"""In a worker: open sockets, connections and files the dataset holds from the main process.

A handle opened in ``Dataset.__init__`` reaches every worker as the same kernel object (fork
copies the descriptor; spawn's pickler duplicates it): four workers then share one socket, one
file offset. A key-value client's replies interleave between workers, and each worker reads
another's answer: wrong content, no exception, no death (what lint rule LD106 says from the
source). At the worker's start, before and after the user's ``worker_init_fn`` (the usual place
to open a fresh handle per worker), the dataset's attributes are searched two levels deep; a
handle that was there before and is still the same object after was inherited, not opened by
this worker.
"""

from __future__ import annotations

import io
import socket
import sys
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from loaderdoctor import boundary

EVENT_KIND = boundary.SHARED_HANDLE_EVENT
DEPTH = 2  # dataset.client, dataset.client.sock
MAX_ATTRIBUTES = 64  # per object: a dataset with a huge __dict__ is not searched whole


def handle_kind(value: Any) -> str | None:
    """What kind of handle ``value`` is, if it is an open one (None otherwise)."""
    if isinstance(value, socket.socket):
        return "socket" if value.fileno() >= 0 else None
    if isinstance(value, Connection):
        return "connection" if not value.closed else None
    if isinstance(value, io.IOBase):
        if value.closed or any(value is std for std in (sys.stdin, sys.stdout, sys.stderr)):
            return None
        try:
            value.fileno()
        except (OSError, ValueError):  # an in-memory stream (BytesIO) shares nothing
            return None
        return "file"
    return None


def _attributes(value: Any) -> Iterator[tuple[str, Any]]:
    try:
        items = vars(value)
    except TypeError:
        return
    for count, (name, attribute) in enumerate(list(items.items())):
        if count >= MAX_ATTRIBUTES:
            return
        yield name, attribute


def find_handles(dataset: Any, depth: int = DEPTH) -> dict[str, tuple[int, str]]:
    """``{"self.client.sock": (id, kind)}`` for each open handle in the dataset's attributes."""
    found: dict[str, tuple[int, str]] = {}
    level = [("self", dataset)]
    for _ in range(depth):
        below = []
        for path, owner in level:
            for name, value in _attributes(owner):
                where = f"{path}.{name}"
                kind = handle_kind(value)
                if kind is not None:
                    found[where] = (id(value), kind)
                elif not isinstance(value, (str, bytes, int, float, bool, type(None))):
                    below.append((where, value))
        level = below
    return found


def inherited(before: dict[str, tuple[int, str]], after: dict[str, tuple[int, str]]) -> list[str]:
    """The handles still there, the same objects, after the worker's own initialisation."""
    return sorted(path for path, held in after.items() if before.get(path) == held)


def event(dataset: Any, paths: list[str], kinds: dict[str, str]) -> dict[str, Any]:
    """The event a worker sends the main process (which warns once per loader)."""
    return {
        "kind": EVENT_KIND,
        "dataset": type(dataset).__name__,
        "handles": [{"attribute": path, "kind": kinds[path]} for path in paths],
    }


def warning_text(event: dict[str, Any]) -> str:
    handles = event.get("handles") or []
    named = ", ".join(f"{h.get('attribute')} (a {h.get('kind')})" for h in handles)
    return (
        f"loaderdoctor: {event.get('dataset')} holds {named}, opened in the main process and "
        "shared by every DataLoader worker: their reads interleave on one handle, so a worker "
        "can get another's data without an error [LD106]. Open it lazily in __getitem__ or in "
        "worker_init_fn, once per worker."
    )


__all__ = ["EVENT_KIND", "event", "find_handles", "handle_kind", "inherited", "warning_text"]
