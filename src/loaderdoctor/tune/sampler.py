"""Peak memory of one trial: the main process, each DataLoader worker and ``/dev/shm``.

A thread samples every ``interval_s``. RSS is cheap to read (``/proc/PID/statm``), but a fork
worker's RSS counts every page it shares with the parent, so summing it over workers overstates
the machine's use many times over. A worker's own cost is its private memory (USS), which needs
``/proc/PID/smaps_rollup``: about 10 ms of kernel page-table walking per read on a process that
has torch loaded, too much to do for 16 workers ten times a second on the cores being measured.
So USS is read for one worker per ``uss_interval_s`` (round robin, new workers first) and, in
between, a worker's private memory is estimated as its last USS plus any RSS it gained since;
a worker never read is estimated from the largest USS read of the others.

What a trial uses is counted the way a memory limit counts it, and each byte once:

- the main process by its anonymous and shared memory (``RssAnon + RssShmem``), not its whole
  RSS: ``RssFile`` is page cache (torch's libraries alone are hundreds of MiB of it), charged to
  whichever cgroup first read it and dropped under memory pressure rather than OOM-killed;
- each worker by its private memory (USS), which holds the batch it is building in shared memory
  while it alone maps it;
- batches in ``/dev/shm`` once: in the worker's USS while it builds them, in the main process's
  ``RssShmem`` once received. ``/dev/shm``'s used space is *not* added: it is the whole machine's
  (another job's files count there) and it would count every batch a second time.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from loaderdoctor.runner.memory import WORKER_NAME

logger = logging.getLogger(__name__)

# At the end of a trial, with every worker still busy on two cores, each read can take 50 ms or
# more; workers of one loader are alike, so a few reads stand for the rest.
FINAL_USS_READS = 4


@dataclass
class _Worker:
    pid: int
    first_rss: int
    uss: int | None = None  # the last USS read
    rss_at_uss: int = 0
    read_at: float = 0.0  # time.monotonic() of the last USS read
    peak: int = 0


@dataclass(frozen=True)
class Resident:
    """A process's resident memory by kind (``/proc/PID/status``), bytes."""

    anon: int
    file: int
    shmem: int

    @property
    def charged(self) -> int:
        """What a memory limit counts and cannot reclaim: anonymous plus shared memory."""
        return self.anon + self.shmem


def read_resident(pid: int) -> Resident | None:
    """``RssAnon``, ``RssFile`` and ``RssShmem`` of ``pid`` (Linux 4.5+), or None if unreadable."""
    fields: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(("RssAnon:", "RssFile:", "RssShmem:")):
                    name, value = line.split(":", 1)
                    fields[name] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if len(fields) != 3:
        return None
    return Resident(fields["RssAnon"], fields["RssFile"], fields["RssShmem"])


@dataclass
class MemoryPeaks:
    main_start_bytes: int
    main_peak_bytes: int
    worker_peak_bytes: list[int]
    shm_peak_bytes: int
    total_peak_bytes: int


def read_uss(pid: int) -> tuple[int, int] | None:
    """Private memory (Private_Clean + Private_Dirty) of ``pid`` and its RSS in the same walk
    of its pages (so that RSS gained after the read is growth the read did not see), or None
    where unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            private = rss = 0
            for line in handle:
                if line.startswith(("Private_Clean:", "Private_Dirty:", "Private_Hugetlb:")):
                    private += int(line.split()[1]) * 1024
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
            return private, rss
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class TrialSampler:
    """Samples this process and its DataLoader workers until ``finish()``; flags the budget."""

    budget_bytes: int | None
    worker_guess_bytes: int  # a worker's private memory before its USS has been read
    interval_s: float = 0.1
    uss_interval_s: float = 0.25
    over_budget: threading.Event = field(default_factory=threading.Event)
    reason: str | None = None
    failure: str | None = None  # why sampling stopped early (a bug of ours), if it did
    _by_pid: dict[int, _Worker] = field(default_factory=dict)
    _main_start: int = 0
    _main_peak: int = 0
    _shm_start: int = 0
    _shm_peak: int = 0
    _total_peak: int = 0
    _last_uss_read: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _worker_pids: set[int] | None = None

    def start(self, main_start_bytes: int, worker_pids: set[int] | None = None) -> None:
        """Start sampling; call it after the workers were forked, never before (fork + threads).

        ``worker_pids``: the trial's own workers. Without it every DataLoader worker child of
        this process counts, also those of a loader still alive elsewhere in the program.
        """
        self._worker_pids = worker_pids
        self._main_start = self._main_peak = main_start_bytes
        own = read_resident(os.getpid())
        self._shm_start = own.shmem if own is not None else 0
        self._thread = threading.Thread(target=self._loop, name="loaderdoctor-tune", daemon=True)
        self._thread.start()

    def finish(self) -> MemoryPeaks:
        """Stop the thread, read the USS of workers not read yet (a few), return the peaks."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.tick(read_all_uss=True)
        ordered = sorted(self._by_pid.values(), key=lambda w: w.pid)
        return MemoryPeaks(
            main_start_bytes=self._main_start,
            main_peak_bytes=self._main_peak,
            worker_peak_bytes=[w.peak for w in ordered],
            shm_peak_bytes=self._shm_peak,
            total_peak_bytes=self._total_peak,
        )

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception as error:  # a bug of ours: logged and said in the trial, not hidden
                logger.exception("loaderdoctor tune: memory sampling failed")
                self.failure = f"memory sampling stopped: {type(error).__name__}: {error}"
                return

    def tick(self, read_all_uss: bool = False) -> None:
        """One look: the main process, every worker of the trial, the totals and the budget."""
        import psutil

        main = psutil.Process()
        try:
            children = main.children()
        except psutil.Error:
            return
        own = read_resident(main.pid)
        main_bytes = own.charged if own is not None else own_memory()
        self._main_peak = max(self._main_peak, main_bytes)
        live, workers_shm = self._live_workers(children)
        now = time.monotonic()
        if live and (read_all_uss or now - self._last_uss_read >= self.uss_interval_s):
            self._read_uss(live, now, read_all_uss)
        workers_total = self._estimate_workers(live)
        # an upper bound: a batch mapped by a worker and the main process counts in both
        shm = (own.shmem if own is not None else 0) + workers_shm
        self._shm_peak = max(self._shm_peak, shm - self._shm_start)
        total = main_bytes + workers_total
        self._total_peak = max(self._total_peak, total)
        if self.budget_bytes is not None and total > self.budget_bytes and not read_all_uss:
            from loaderdoctor.units import format_bytes

            self.reason = (
                f"stopped: {format_bytes(total)} in use > budget {format_bytes(self.budget_bytes)}"
            )
            self.over_budget.set()

    def _live_workers(self, children: list[Any]) -> tuple[list[tuple[_Worker, int]], int]:
        """The trial's workers alive now with their RSS, and the shared memory they map."""
        import psutil

        live: list[tuple[_Worker, int]] = []
        shm = 0
        for child in children:
            if self._worker_pids is not None and child.pid not in self._worker_pids:
                continue
            try:
                if child.name() != WORKER_NAME:
                    continue
                rss = child.memory_info().rss
            except psutil.Error:
                continue
            if rss == 0:
                continue  # exiting
            worker = self._by_pid.get(child.pid)
            if worker is None:
                worker = self._by_pid[child.pid] = _Worker(child.pid, rss)
            live.append((worker, rss))
            resident = read_resident(child.pid)
            shm += resident.shmem if resident is not None else 0
        return live, shm

    def _read_uss(self, live: list[tuple[_Worker, int]], now: float, read_all: bool) -> None:
        """USS of the worker read longest ago; at the last look, of a few: those never read,
        then those read longest ago. A trial that ends early (0.13 s, decided) has read each
        worker once or twice, some while they still allocated: a 2-worker trial's worker read
        at 113 MiB of its 160 once, and the memory model's line through it put 4 workers
        within a budget for 2.7."""
        pending = [min(live, key=_uss_age)]
        if read_all:
            pending = sorted(live, key=_uss_age)[:FINAL_USS_READS]
        for worker, _rss in pending:
            # the RSS of the same read, not the one looked at before it: a worker that built a
            # 256 MiB block in between was charged it twice
            read = read_uss(worker.pid)
            worker.read_at = now
            if read is not None:
                worker.uss, worker.rss_at_uss = read
        self._last_uss_read = now

    def _estimate_workers(self, live: list[tuple[_Worker, int]]) -> int:
        """Each worker's private memory now (last USS plus RSS gained since); their sum.

        A worker never read is estimated as at least the largest USS read of the others (what
        it may be about to allocate too), and as its own RSS growth on top of the private
        memory the others had when first seen: not on top of their whole USS, which holds the
        same growth (a 256 MiB block counted twice made 6 workers of a benchmark look 2.8 GiB
        where they held 2.1).
        """
        known = [w for w, _ in live if w.uss is not None]
        guess = max((w.uss or 0 for w in known), default=self.worker_guess_bytes)
        base = max(
            (max(0, (w.uss or 0) - max(0, w.rss_at_uss - w.first_rss)) for w in known), default=0
        )
        total = 0
        for worker, rss in live:
            if worker.uss is None:
                estimate = max(guess, base + max(0, rss - worker.first_rss))
            else:
                estimate = worker.uss + max(0, rss - worker.rss_at_uss)
            worker.peak = max(worker.peak, estimate)
            total += estimate
        return total


def _uss_age(item: tuple[_Worker, int]) -> tuple[bool, float]:
    worker, _rss = item
    return (worker.uss is not None, worker.read_at)


def own_memory() -> int:
    """This process's charged memory (``RssAnon + RssShmem``); its RSS where that is unreadable."""
    own = read_resident(os.getpid())
    if own is not None:
        return own.charged
    import psutil

    return int(psutil.Process(os.getpid()).memory_info().rss)
