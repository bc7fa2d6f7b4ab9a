"""Look at a running job's loaders from outside, again and again, without writing to it.

Each look maps every table its processes published (``runner.live``) read-only and reads each
worker's row (``recorder.TableReader``), and asks the kernel (psutil) for each worker's memory
and CPU time. Two looks make the rates; the looks kept per worker make its typical sample time,
against which a sample in flight is judged slow.
"""

from __future__ import annotations

import collections
import contextlib
import shutil
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from loaderdoctor.recorder import TableLocation, TableReader, WorkerSnapshot
from loaderdoctor.runner import protocol
from loaderdoctor.top.find import Job
from loaderdoctor.top.model import LoaderView, ProcessView, TopSnapshot, WorkerView

# A sample is slow when in flight this many times its worker's typical time, and at least
# SLOW_FLOOR_S (a 5 ms sample taking 60 ms is noise, not news).
SLOW_FACTOR = 10.0
SLOW_FLOOR_S = 1.0
HISTORY = 20  # looks kept per worker for its median sample time
BUSY_STATES = ("fetching", "collating")
_STATES = {"not-started": "starting", "init": "starting", "idle": "waiting"}
_STATES.update({"fetch": "fetching", "collate": "collating"})


@dataclass
class _Row:
    snapshot: WorkerSnapshot
    alive: bool
    cpu_s: float | None
    rss_bytes: int | None
    started_wall: float | None


@dataclass
class _Table:
    location: TableLocation
    rows: list[_Row]


@dataclass
class _ProcessLook:
    pid: int
    rank: int | None
    node: str | None
    index: dict[str, Any]
    tables: list[_Table]
    incident_pids: list[Any]
    batches_delivered: int


@dataclass
class _Look:
    monotonic: float
    wall: float
    processes: list[_ProcessLook] = field(default_factory=list)
    incidents: int = 0  # of every process of the job, ended ones too
    unreadable: dict[int, str] = field(default_factory=dict)  # pid -> why its tables are not


class Watcher:
    """Looks at one job; ``snapshot()`` is what it sees now, with rates since the last look."""

    def __init__(self, job: Job, hang_after_s: float | None = None) -> None:
        self.job = job
        self.hang_after_s = hang_after_s
        self._readers: dict[tuple[int, int, int | None], TableReader] = {}
        self._processes: dict[int, psutil.Process] = {}
        self._history: dict[int, collections.deque[float]] = {}
        self._last: _Look | None = None

    def snapshot(self, interval_s: float = 1.0) -> TopSnapshot:
        """What the job's loaders do now; the first call looks twice, ``interval_s`` apart."""
        if self._last is None and interval_s > 0:
            self._last = self._look()
            time.sleep(interval_s)
        look = self._look()
        snapshot = self._build(look, self._last)
        self._last = look
        return snapshot

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    # --- one look ------------------------------------------------------------------------------
    def _look(self) -> _Look:
        look = _Look(time.monotonic(), time.time())
        seen: set[tuple[int, int, int | None]] = set()
        for node, folder in self.job.folders:
            directory = protocol.incidents_dir(folder)
            states = {int(s.get("pid", 0)): s for s in protocol.read_states(directory)}
            incident_pids: dict[int, list[Any]] = {}
            for record in protocol.read_incident_records(directory):
                if protocol.FOLLOW_UP in record:  # more about an incident counted already
                    continue
                incident = record.get("incident") or {}
                incident_pids.setdefault(int(record.get("pid", 0)), []).append(incident.get("pid"))
                look.incidents += 1
            for index in protocol.read_live_indexes(directory):
                pid = int(index["pid"])
                if not _alive(pid):
                    continue
                tables = []
                for entry in index.get("tables", []):
                    location = TableLocation.from_dict(entry)
                    key = (pid, location.inode, location.fd)
                    reader = self._reader(key, pid, location, look)
                    if reader is None:
                        continue
                    seen.add(key)
                    tables.append(
                        _Table(location, [self._row(reader, w) for w in range(reader.rows)])
                    )
                look.processes.append(
                    _ProcessLook(
                        pid=pid,
                        rank=index.get("rank"),
                        node=node,
                        index=index,
                        tables=tables,
                        incident_pids=incident_pids.get(pid, []),
                        batches_delivered=int(states.get(pid, {}).get("batches", 0)),
                    )
                )
        for key in [k for k in self._readers if k not in seen]:
            self._readers.pop(key).close()  # a pool that ended: its table is no longer listed
        return look

    def _reader(
        self, key: tuple[int, int, int | None], pid: int, location: TableLocation, look: _Look
    ) -> TableReader | None:
        reader = self._readers.get(key)
        if reader is None:
            try:
                reader = TableReader(pid, location)
            except PermissionError as error:
                look.unreadable[pid] = error.strerror or str(error)
                return None
            except OSError:  # the pool ended since the index was written
                return None
            self._readers[key] = reader
        return reader

    def _row(self, reader: TableReader, worker_id: int) -> _Row:
        snapshot = reader.snapshot(worker_id)
        if not snapshot.pid:
            return _Row(snapshot, True, None, None, None)
        process = self._processes.get(snapshot.pid)
        try:
            if process is None:
                process = self._processes[snapshot.pid] = psutil.Process(snapshot.pid)
            with process.oneshot():
                alive = process.status() != psutil.STATUS_ZOMBIE
                times = process.cpu_times()
                rss = process.memory_info().rss
                started = process.create_time()
        except psutil.Error:
            return _Row(snapshot, False, None, snapshot.rss_bytes or None, None)
        return _Row(snapshot, alive, times.user + times.system, rss, started)

    # --- from looks to the snapshot ------------------------------------------------------------
    def _build(self, look: _Look, last: _Look | None) -> TopSnapshot:
        interval = look.monotonic - last.monotonic if last is not None else 0.0
        before = _rows_by_pid(last) if last is not None else {}
        snapshot = TopSnapshot(
            report_dir=str(self.job.report_dir),
            run_pid=self.job.run_pid,
            command=self.job.command,
            up_s=round(look.wall - self.job.started_wall, 1),
            incidents=look.incidents,
            interval_s=round(interval, 2),
        )
        with contextlib.suppress(OSError):
            usage = shutil.disk_usage("/dev/shm")
            snapshot.shm_used_bytes, snapshot.shm_total_bytes = usage.used, usage.total
        for process in look.processes:
            view = ProcessView(
                process.pid, process.rank, process.node, batches_delivered=process.batches_delivered
            )
            view.loaders = self._loaders(process, before, interval, look.wall)
            snapshot.processes.append(view)
        for pid, why in look.unreadable.items():
            snapshot.notes.append(
                f"the workers of process {pid} cannot be read ({why}): run top as the job's user, "
                "or as root"
            )
        if not snapshot.processes:
            snapshot.notes.append(
                "no process of the job holds a supervised DataLoader now (none built yet, or "
                "those that did have ended)"
            )
        return snapshot

    def _loaders(
        self,
        process: _ProcessLook,
        before: dict[tuple[int, int], _Row],
        interval: float,
        now_wall: float,
    ) -> list[LoaderView]:
        published = process.index.get("loaders", [])
        loaders = [
            LoaderView(
                str(entry.get("site", "?")),
                int(entry.get("num_workers", 0)),
                self._hang_after(entry.get("hang_timeout")),
            )
            for entry in published
        ]
        pids = [set(entry.get("worker_pids", [])) for entry in published]
        for number, loader in enumerate(loaders):
            loader.incidents = sum(1 for pid in process.incident_pids if pid in pids[number])
        unmatched: list[LoaderView] = []
        for table in process.tables:
            live = {row.snapshot.pid for row in table.rows if row.snapshot.pid}
            owners = [n for n, known in enumerate(pids) if live & known]
            if owners:
                loader = loaders[owners[0]]
            elif len(loaders) == 1:
                loader = loaders[0]  # its workers have not said their pids yet
            else:
                loader = LoaderView("?", table.location.rows, self._hang_after(None))
                unmatched.append(loader)
            for worker_id, row in enumerate(table.rows):
                previous = before.get((row.snapshot.pid, row.snapshot.generation))
                loader.workers.append(
                    self._worker(worker_id, row, previous, interval, now_wall, loader.hang_after_s)
                )
        for loader in [*loaders, *unmatched]:
            if interval > 0 and loader.workers:
                loader.batches_per_s = round(sum(w.batches_per_s or 0 for w in loader.workers), 1)
                loader.samples_per_s = round(
                    sum(_samples_rate(w, before, interval) for w in loader.workers), 1
                )
        return [*loaders, *unmatched]

    def _hang_after(self, loaders_own: Any) -> float | None:
        """``--hung-after`` where given, else the loader's own ``hang_timeout``."""
        if self.hang_after_s is not None:
            return self.hang_after_s
        return float(loaders_own) if isinstance(loaders_own, (int, float)) else None

    def _worker(
        self,
        worker_id: int,
        row: _Row,
        previous: _Row | None,
        interval: float,
        now_wall: float,
        hang_after: float | None,
    ) -> WorkerView:
        snap = row.snapshot
        if not snap.pid:
            state = "respawning" if snap.generation > 1 else "starting"
        elif not row.alive:
            state = "dead"
        else:
            state = _STATES.get(snap.stage, "starting")
        shows_sample = state in (*BUSY_STATES, "dead")
        view = WorkerView(
            worker_id=worker_id,
            pid=snap.pid or None,
            state=state,
            in_flight_index=snap.in_flight_index if shows_sample else None,
            in_flight_key=snap.named_key if shows_sample else None,
            in_flight_file=snap.named_url if shows_sample else None,
            state_for_s=round(snap.stage_age_s, 1),
            rss_bytes=row.rss_bytes or snap.rss_bytes or None,
            batches_done=snap.batches_done,
            samples_started=snap.samples_started,
        )
        if previous is not None and interval > 0:
            if row.cpu_s is not None and previous.cpu_s is not None:
                view.cpu_percent = round(100 * (row.cpu_s - previous.cpu_s) / interval, 1)
            done = snap.batches_done - previous.snapshot.batches_done
            view.batches_per_s = round(done / interval, 1)
            started = snap.samples_started - previous.snapshot.samples_started
            if started > 0:
                history = self._history.setdefault(snap.pid, collections.deque(maxlen=HISTORY))
                history.append(interval / started)
        view.typical_sample_s = self._typical(row, now_wall)
        view.flag = _flag(view, hang_after)
        return view

    def _typical(self, row: _Row, now_wall: float) -> float | None:
        """The worker's recent median time per sample, else its life's mean (from its start)."""
        snap = row.snapshot
        history = self._history.get(snap.pid)
        if history:
            return round(statistics.median(history), 3)
        if row.started_wall is None or snap.samples_started < 2:
            return None
        busy = snap.stage_age_s if snap.stage in ("fetch", "collate") else 0.0
        finished = snap.samples_started - (1 if busy else 0)
        return round(max(now_wall - row.started_wall - busy, 0.0) / finished, 3)


def _flag(view: WorkerView, hang_after: float | None) -> str | None:
    busy = view.state in (*BUSY_STATES, "starting") and view.pid is not None
    if busy and hang_after is not None and view.state_for_s >= hang_after:
        return "hung"
    typical = view.typical_sample_s
    if view.state in BUSY_STATES and typical is not None:
        if view.state_for_s >= max(SLOW_FACTOR * typical, SLOW_FLOOR_S):
            return "slow"
    return None


def _samples_rate(
    worker: WorkerView, before: dict[tuple[int, int], _Row], interval: float
) -> float:
    for (pid, _), row in before.items():
        if pid == worker.pid:
            return max(worker.samples_started - row.snapshot.samples_started, 0) / interval
    return 0.0


def _rows_by_pid(look: _Look) -> dict[tuple[int, int], _Row]:
    return {
        (row.snapshot.pid, row.snapshot.generation): row
        for process in look.processes
        for table in process.tables
        for row in table.rows
        if row.snapshot.pid
    }


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
