"""The flight recorder: one row of int64 counters per worker, in shared memory.

Workers write their row (which sample is in flight, which stage, a timestamp, their RSS); the
parent reads it after a death or while waiting, so it knows what a worker was doing when it died
without the worker's cooperation.

The row's layout (``Field``, ``Stage``) is ``boundary``'s, which owns what crosses processes.

The table is a shared torch tensor. With torch's default ``file_descriptor`` sharing strategy the
backing /dev/shm file is unlinked right after it is created, so nothing is left behind even when
the parent is SIGKILLed; under spawn/forkserver the tensor travels to the workers as a file
descriptor with the pickled dataset.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import time
import weakref
from dataclasses import dataclass
from typing import Any

from loaderdoctor.boundary import (
    N_FIELDS,
    NAME_SEPARATOR,
    NAME_WORDS,
    NO_INDEX,
    STAGE_NAMES,
    Field,
    Stage,
)
from loaderdoctor.system.memory import own_rss_bytes


@dataclass(frozen=True)
class WorkerSnapshot:
    worker_id: int
    pid: int
    stage: str
    in_flight_index: int | None
    samples_started: int
    batches_done: int
    stage_age_s: float
    rss_bytes: int
    errors: int
    send_errors: int = 0
    events: int = 0
    # The stream item last named in this worker (its position, key and URL), where one was
    named_position: int | None = None
    named_key: str | None = None
    named_url: str | None = None
    generation: int = 0  # 1 for a slot's first worker, more once it was handed to a new one

    @property
    def reached_init(self) -> bool:
        return self.pid != 0


class FlightRecorder:
    """Owned by the parent; a picklable handle of it goes to every worker."""

    def __init__(self, num_workers: int) -> None:
        # torch on first use: ``loaderdoctor top`` reads tables from outside without it
        import torch

        self.num_workers = num_workers
        self.table = torch.zeros((num_workers, N_FIELDS), dtype=torch.int64).share_memory_()
        self._view: memoryview | None = None
        LIVE_RECORDERS.add(self)  # the parent's tables only: a worker's copy is unpickled

    def __getstate__(self) -> dict[str, Any]:
        return {"num_workers": self.num_workers, "table": self.table}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.num_workers = state["num_workers"]
        self.table = state["table"]
        self._view = None

    @property
    def view(self) -> memoryview:
        """The table as a flat int64 memoryview (row-major) over the shared storage.

        torch alone, no numpy: torch wheels do not depend on numpy, and ``Tensor.numpy()`` raises
        "Numpy is not available" where it is missing (slim containers). An item write through the
        memoryview costs ~0.1 µs; a tensor index costs ~5 µs.
        """
        if self._view is None:
            nbytes = self.table.numel() * self.table.element_size()
            # from_address does not keep the tensor alive: self.table does, for as long as the view.
            raw = (ctypes.c_char * nbytes).from_address(self.table.data_ptr())
            self._view = memoryview(raw).cast("B").cast("q")
        return self._view

    # --- parent side ---------------------------------------------------------------------
    def reset_slot(self, worker_id: int) -> None:
        flat, base = self.view, worker_id * N_FIELDS
        generation = flat[base + Field.GENERATION]
        for field in range(N_FIELDS):
            flat[base + field] = 0
        flat[base + Field.GENERATION] = generation + 1
        flat[base + Field.INDEX] = NO_INDEX

    def total(self, field: Field) -> int:
        """One counter summed over every worker: a column read, cheap enough for every batch."""
        flat = self.view
        return sum(flat[row * N_FIELDS + field] for row in range(self.num_workers))

    def snapshot(self, worker_id: int) -> WorkerSnapshot:
        return read_snapshot(self.view, worker_id)

    def location(self) -> TableLocation | None:
        """Where another process of the same user finds this table (``loaderdoctor top``)."""
        return locate_table(self.table.data_ptr(), self.num_workers)

    # --- worker side ---------------------------------------------------------------------
    def attach(self, worker_id: int) -> WorkerSlot:
        # A flat int64 memoryview: an item write costs ~0.1 µs, half of numpy's and a tiny
        # fraction of a tensor index, which matters on datasets of tiny samples.
        return WorkerSlot(self.view, worker_id * N_FIELDS)


def read_snapshot(flat: memoryview, worker_id: int) -> WorkerSnapshot:
    """One worker's row of a table (the parent's own, or one mapped by a reader outside)."""
    base = worker_id * N_FIELDS
    row = flat[base : base + N_FIELDS].tolist()
    index = row[Field.INDEX]
    since = row[Field.STAGE_SINCE_NS]
    age = (time.monotonic_ns() - since) / 1e9 if since else 0.0
    try:
        stage = STAGE_NAMES[Stage(row[Field.STAGE])]
    except ValueError:
        stage = "unknown"
    return WorkerSnapshot(
        worker_id=worker_id,
        pid=row[Field.PID],
        stage=stage,
        in_flight_index=None if index == NO_INDEX else index,
        samples_started=row[Field.SAMPLES_STARTED],
        batches_done=row[Field.BATCHES_DONE],
        stage_age_s=age,
        rss_bytes=row[Field.RSS_BYTES],
        errors=row[Field.ERRORS],
        send_errors=row[Field.SEND_ERRORS],
        events=row[Field.EVENTS],
        generation=row[Field.GENERATION],
        **_name(flat, base, row),
    )


def _name(flat: memoryview, base: int, row: list[int]) -> dict[str, Any]:
    named = row[Field.NAMED_POSITION]
    size = min(max(row[Field.NAME_BYTES], 0), NAME_WORDS * 8)
    if not named or not size:
        return {}
    start = (base + Field.NAME_TEXT) * 8
    text = bytes(flat.cast("B")[start : start + size]).decode("utf-8", "replace")
    key, _, url = text.partition(NAME_SEPARATOR)
    return {"named_position": named - 1, "named_key": key, "named_url": url or None}


# --- reading a table from another process ------------------------------------------------------
# The parent's live tables, so that ``loaderdoctor run`` can say where they are without the
# supervisor holding a list of its own (a table goes when its pool's iterator does).
LIVE_RECORDERS: weakref.WeakSet[FlightRecorder] = weakref.WeakSet()


@dataclass(frozen=True)
class TableLocation:
    """A table as another process opens it: torch's default sharing strategy unlinks the
    /dev/shm file at once and keeps its descriptor (``fd``) open in the owner, which a process of
    the same user reopens as ``/proc/<pid>/fd/<fd>``; the ``file_system`` strategy leaves a
    ``path``. ``inode`` tells a reused descriptor from the table's."""

    fd: int | None
    path: str | None
    inode: int
    offset: int
    rows: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "fd": self.fd,
            "path": self.path,
            "inode": self.inode,
            "offset": self.offset,
            "rows": self.rows,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TableLocation:
        fd, path = data.get("fd"), data.get("path")
        return cls(
            fd=int(fd) if fd is not None else None,
            path=str(path) if path is not None else None,
            inode=int(data["inode"]),
            offset=int(data["offset"]),
            rows=int(data["rows"]),
        )


def locate_table(address: int, rows: int) -> TableLocation | None:
    """The file mapped at ``address`` in this process and the descriptor that holds it open;
    None where /proc says nothing (not Linux) or the memory is not a file's."""
    try:
        with open("/proc/self/maps") as handle:
            maps = handle.readlines()
    except OSError:
        return None
    for line in maps:
        parts = line.split(maxsplit=5)
        if len(parts) < 6:
            continue
        start, end = (int(value, 16) for value in parts[0].split("-"))
        if not start <= address < end:
            continue
        inode = int(parts[4])
        path = parts[5].strip()
        if not inode:
            return None
        deleted = path.endswith(" (deleted)")
        offset = int(parts[2], 16) + address - start
        return TableLocation(
            fd=_descriptor_of(inode),
            path=None if deleted else path,
            inode=inode,
            offset=offset,
            rows=rows,
        )
    return None


def _descriptor_of(inode: int) -> int | None:
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in names:
        try:
            if os.stat(f"/proc/self/fd/{name}").st_ino == inode:
                return int(name)
        except (OSError, ValueError):
            continue
    return None


class TableReader:
    """A read-only mapping of another process's table: the reader writes nothing there."""

    def __init__(self, pid: int, location: TableLocation) -> None:
        candidates = []
        if location.fd is not None:
            candidates.append(f"/proc/{pid}/fd/{location.fd}")
        if location.path is not None:
            candidates.append(location.path)
        error: OSError | None = None
        for path in candidates:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError as failed:
                error = failed
                continue
            try:
                if os.fstat(fd).st_ino != location.inode:
                    error = OSError(f"{path} is no longer the table (the pool ended)")
                    continue
                size = location.offset + location.rows * N_FIELDS * 8
                page = mmap.ALLOCATIONGRANULARITY
                start = location.offset - location.offset % page
                self._map = mmap.mmap(
                    fd, size - start, mmap.MAP_SHARED, mmap.PROT_READ, offset=start
                )
            finally:
                os.close(fd)
            self.rows = location.rows
            skip = location.offset - start
            self._bytes = memoryview(self._map)
            self.flat = self._bytes[skip:].cast("q")
            return
        raise error or OSError("the table has no descriptor nor path to open")

    def snapshot(self, worker_id: int) -> WorkerSnapshot:
        return read_snapshot(self.flat, worker_id)

    def close(self) -> None:
        self.flat.release()
        self._bytes.release()
        self._map.close()


# Plain ints for the hot path: IntEnum members cost an __index__ call per access.
_STAGE = int(Field.STAGE)
_INDEX = int(Field.INDEX)
_SAMPLES = int(Field.SAMPLES_STARTED)
_BATCHES = int(Field.BATCHES_DONE)
_SINCE = int(Field.STAGE_SINCE_NS)
_RSS = int(Field.RSS_BYTES)
_ERRORS = int(Field.ERRORS)
_SEND_ERRORS = int(Field.SEND_ERRORS)
_EVENTS = int(Field.EVENTS)
_FETCH = int(Stage.FETCH)
RSS_EVERY_MASK = 7
_IDLE = int(Stage.IDLE)
_NAMED_POSITION = int(Field.NAMED_POSITION)
_NAME_BYTES = int(Field.NAME_BYTES)
_NAME_TEXT = int(Field.NAME_TEXT)


class WorkerSlot:
    """A worker's own row. Every method is a handful of item writes into shared memory."""

    __slots__ = ("_base", "_bytes", "_flat", "_monotonic_ns", "_page", "_statm_fd")

    def __init__(self, flat: memoryview, base: int) -> None:
        self._flat = flat
        self._bytes = flat.cast("B")
        self._base = base
        self._monotonic_ns = time.monotonic_ns
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 0  # Windows: none
        try:
            self._statm_fd: int | None = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._statm_fd = None  # no /proc (macOS, Windows): psutil asks the kernel instead
        flat[base + Field.PID] = os.getpid()
        flat[base + _INDEX] = NO_INDEX
        self.stage(Stage.INIT)

    def hot_path(self) -> tuple[memoryview, int, Any]:
        """(the shared row buffer, this row's offset, the clock) for per-sample loops."""
        return self._flat, self._base, self._monotonic_ns

    def stage(self, stage: Stage) -> None:
        flat, base = self._flat, self._base
        flat[base + _STAGE] = int(stage)
        flat[base + _SINCE] = self._monotonic_ns()

    def fetching(self, index: Any) -> None:
        flat, base = self._flat, self._base
        flat[base + _INDEX] = index if type(index) is int else NO_INDEX
        flat[base + _SAMPLES] += 1
        flat[base + _STAGE] = _FETCH
        flat[base + _SINCE] = self._monotonic_ns()

    def collated(self) -> None:
        flat, base = self._flat, self._base
        batches = flat[base + _BATCHES] + 1
        flat[base + _BATCHES] = batches
        flat[base + _STAGE] = _IDLE
        flat[base + _SINCE] = self._monotonic_ns()
        if batches & RSS_EVERY_MASK == 1:  # /proc reads cost µs: one batch in eight is enough
            self.sample_rss()

    def error(self) -> None:
        self._flat[self._base + _ERRORS] += 1

    def name_item(self, position: int, key: str, url: str | None) -> None:
        """The stream item at ``position`` is ``key`` (from ``url``): what names it should its
        worker die with it in flight. The position goes last: a reader never pairs it with the
        text of another item."""
        flat, base = self._flat, self._base
        text = key if url is None else f"{key}{NAME_SEPARATOR}{url}"
        data = text.encode("utf-8", "replace")[: NAME_WORDS * 8]
        flat[base + _NAMED_POSITION] = 0
        start = (base + _NAME_TEXT) * 8
        self._bytes[start : start + len(data)] = data
        flat[base + _NAME_BYTES] = len(data)
        flat[base + _NAMED_POSITION] = position + 1

    def send_error(self) -> None:
        self._flat[self._base + _SEND_ERRORS] += 1

    def event(self) -> None:
        self._flat[self._base + _EVENTS] += 1

    def sample_rss(self) -> None:
        if self._statm_fd is None:
            rss = own_rss_bytes()
            if rss is not None:
                self._flat[self._base + _RSS] = rss
            return
        try:
            fields = os.pread(self._statm_fd, 128, 0).split()
            self._flat[self._base + _RSS] = int(fields[1]) * self._page
        except (OSError, IndexError, ValueError):
            pass
