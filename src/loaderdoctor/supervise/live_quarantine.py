"""The quarantine that live workers read: how a quarantined sample is kept from loading.

A pool's workers get the quarantine as it was when they started, inside their dataset's sample
policy, and every sample quarantined later (a death's culprit, re-tried alone) through this table
in shared memory, next to the flight recorder: the worker's dataset wrapper consults it just
before each sample, so a batch sent before the quarantine (prefetched, or owed and re-sent to a
replacement) leaves the sample out too. The main process never edits the batches it sends.

The table is append-only, one int64 per entry: ``index + 1``, 0 for a free slot. A worker reads
the slot after the last one it has seen: one shared-memory read per check while nothing is new,
and no ordering between two writes to rely on (one aligned 8-byte store is seen whole or not at
all). The main process is the only writer. Beyond ``CAPACITY`` entries in one pool's life the
workers can be told no more: the pool is then rebuilt, and its new workers start knowing the
whole quarantine (``Recovery``).
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

CAPACITY = 1 << 14  # 128 KiB of shared memory per pool
_LIMIT = 2**63 - 1  # index + 1 must fit an int64


class LiveQuarantine:
    """Owned by the main process (``add``); a picklable handle of it goes to every worker,
    which reads it through ``reader()``."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.table = torch.zeros(capacity, dtype=torch.int64).share_memory_()
        self.written = 0
        self._view: memoryview | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"table": self.table}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.table = state["table"]
        self.written = 0  # a worker never writes
        self._view = None

    @property
    def view(self) -> memoryview:
        """The table as a flat int64 memoryview over the shared storage (as the recorder's)."""
        if self._view is None:
            nbytes = self.table.numel() * self.table.element_size()
            raw = (ctypes.c_char * nbytes).from_address(self.table.data_ptr())
            self._view = memoryview(raw).cast("B").cast("q")
        return self._view

    def add(self, index: Any) -> bool:
        """Tell the workers that ``index`` is quarantined; False when it cannot be said (not an
        index, or the table is full)."""
        if type(index) is not int or not 0 <= index < _LIMIT or self.written >= len(self.view):
            return False
        self.view[self.written] = index + 1
        self.written += 1
        return True

    def reader(self) -> QuarantineReader:
        return QuarantineReader(self.view)


class QuarantineReader:
    """A worker's view of the live quarantine: ``index in reader``, catching up on new entries
    first. Never raises: an index that cannot be hashed (a list) is never quarantined."""

    __slots__ = ("_flat", "_known", "_seen")

    def __init__(self, flat: memoryview | None = None) -> None:
        self._flat = flat
        self._seen = 0
        self._known: set[int] = set()

    def grown(self) -> bool:
        """Whether anything was quarantined since this pool started: one read while not."""
        if self._known:
            return True
        flat = self._flat
        return flat is not None and len(flat) > 0 and flat[0] != 0

    def __contains__(self, index: object) -> bool:
        flat, seen = self._flat, self._seen
        if flat is not None and seen < len(flat) and flat[seen] != 0:
            self._catch_up()
        if not self._known:
            return False
        try:
            return index in self._known
        except TypeError:
            return False

    def _catch_up(self) -> None:
        flat = self._flat
        assert flat is not None
        seen, size = self._seen, len(flat)
        while seen < size:
            entry = flat[seen]
            if entry == 0:
                break
            self._known.add(entry - 1)
            seen += 1
        self._seen = seen


NO_LIVE_QUARANTINE = QuarantineReader()


def for_pool(supervision: Any, iterable: bool) -> LiveQuarantine | None:
    """A new pool's live quarantine, registered with its supervision so that every later
    ``quarantine_add`` reaches it; None where nothing can be quarantined by index (a stream, or
    neither healing nor a sample policy)."""
    settings = supervision.settings
    if iterable or not (settings.heal or settings.on_error != "raise"):
        return None
    live = LiveQuarantine()
    supervision.live_quarantines.add(live)
    return live


__all__ = ["CAPACITY", "NO_LIVE_QUARANTINE", "LiveQuarantine", "QuarantineReader", "for_pool"]
