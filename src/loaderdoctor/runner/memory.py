"""The memory timeline of a run: each DataLoader worker's RSS/USS/PSS and /dev/shm, over time.

The ``run`` parent samples the command's process tree from outside (no cost inside the training
loop) and keeps, per process, the peaks of every sample and a series thinned to a bounded size.
``find_memory_growth`` then reads the series for the copy-on-read growth of fork workers.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from loaderdoctor.runner.model import MemoryFinding, MemoryReport, ProcessMemory, RunReport

WORKER_NAME = "pt_data_worker"  # torch names its worker processes so (worker.py, _worker_loop)
MAX_POINTS = 240  # per series; older points are thinned by two when it fills
MAX_PROCESSES = 128  # per tick, so a command that starts a crowd cannot stall the sampler
MiB = 1024 * 1024

# The growth rule. A fork worker starts with almost nothing private (USS of a few MiB) and, when
# the Dataset keeps its metadata in Python lists or dicts, every object it reads has its reference
# count written, which copies the page: the worker's private memory grows steadily towards the
# size of the metadata, in every worker at once (PyTorch issue #13246).
GROWTH_MIN_BYTES = 32 * MiB
GROWTH_MIN_R2 = 0.7
GROWTH_MIN_POINTS = 6
GROWTH_MIN_SPAN_S = 1.5
COPY_ON_READ_DOCS = "https://github.com/pytorch/pytorch/issues/13246"


@dataclass
class _Track:
    memory: ProcessMemory
    stride: int = 1
    ticks: int = 0
    worker: bool = False
    environ_read: bool = False


@dataclass
class MemorySampler:
    """Samples the tree under ``root_pid`` every ``interval_s`` in a thread until ``stop()``."""

    root_pid: int
    started: float  # time.monotonic() at the command's start
    interval_s: float = 0.5
    shm_path: str = "/dev/shm"
    # Told of every process of the tree on every tick, with the time (``deaths.DeathWatch``)
    on_process: Callable[[int, float], None] | None = None
    _tracks: dict[int, _Track] = field(default_factory=dict)
    _shm: list[tuple[float, int]] = field(default_factory=list)
    _shm_stride: int = 1
    _shm_total: int | None = None
    _shm_peak: int | None = None
    _ticks: int = 0
    _notes: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="loaderdoctor-memory", daemon=True)
        self._thread.start()

    def stop(self) -> MemoryReport:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.report()

    def _loop(self) -> None:
        try:
            import psutil  # noqa: F401
        except ImportError as error:
            self._notes.append(f"memory not sampled: {error}")
            return
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as error:  # a probe must never break the run
                self._notes.append(f"memory sampling stopped: {type(error).__name__}: {error}")
                return
            self._stop.wait(self.interval_s)

    def tick(self) -> None:
        import psutil

        now = round(time.monotonic() - self.started, 3)
        self._ticks += 1
        try:
            root = psutil.Process(self.root_pid)
            processes = [root, *root.children(recursive=True)][:MAX_PROCESSES]
        except psutil.Error:
            return
        for process in processes:
            if self.on_process is not None:
                self.on_process(process.pid, now)
            try:
                self._sample(process, now)
            except psutil.Error:
                continue  # gone between the listing and the read
        try:
            usage = shutil.disk_usage(self.shm_path)
        except OSError as error:
            if not self._notes or "shm" not in self._notes[-1]:
                self._notes.append(f"{self.shm_path} not readable: {error}")
            return
        self._shm_total = usage.total
        self._shm_peak = max(self._shm_peak or 0, usage.used)
        if self._ticks % self._shm_stride == 0:
            self._shm.append((now, usage.used))
            if len(self._shm) >= MAX_POINTS:
                self._shm = self._shm[::2]
                self._shm_stride *= 2

    def _sample(self, process: object, now: float) -> None:
        import psutil

        assert isinstance(process, psutil.Process)
        track = self._tracks.get(process.pid)
        if track is None:
            track = _Track(ProcessMemory(pid=process.pid, role="main", first_seen_s=now))
            track.memory.parent_pid = process.ppid()
            self._tracks[process.pid] = track
        if not track.worker and process.name() == WORKER_NAME:
            track.worker = True
            track.memory.role = "worker"
            track.memory.start_method = _start_method(process)
            # torch names the process in _worker_loop: what came before was its start-up (a
            # spawned worker importing torch again, ~500 MiB under 2.14's CUDA build), not a
            # growth of the worker's own.
            track.memory.series = []
            track.ticks = 0
        if not track.environ_read:
            track.environ_read = True
            track.memory.rank = _rank(process)
        uss = pss = None
        if track.worker:
            try:
                full = process.memory_full_info()
                rss, uss, pss = full.rss, full.uss, getattr(full, "pss", None)
            except psutil.AccessDenied:
                rss = process.memory_info().rss
        else:
            rss = process.memory_info().rss
        if rss == 0:
            return  # an exiting process (a zombie) reads as empty: not a memory reading
        memory = track.memory
        memory.last_seen_s = now
        memory.peak_rss_bytes = max(memory.peak_rss_bytes, rss)
        if uss is not None:
            memory.peak_uss_bytes = max(memory.peak_uss_bytes or 0, uss)
        if pss is not None:
            memory.peak_pss_bytes = max(memory.peak_pss_bytes or 0, pss)
        track.ticks += 1
        if (track.ticks - 1) % track.stride == 0:
            memory.series.append((now, rss, uss, pss))
            if len(memory.series) >= MAX_POINTS:
                memory.series = memory.series[::2]
                track.stride *= 2

    def report(self) -> MemoryReport:
        # A process seen only while it exited has no reading: it is not part of the picture.
        tracks = [t for t in self._tracks.values() if t.memory.peak_rss_bytes > 0]
        worker_parents = {t.memory.parent_pid for t in tracks if t.worker}
        for track in tracks:  # a worker's rank is its parent's (workers inherit RANK anyway)
            if track.worker and track.memory.rank is None:
                parent = self._tracks.get(track.memory.parent_pid or -1)
                track.memory.rank = parent.memory.rank if parent else None
        kept = [t.memory for t in tracks if t.worker or t.memory.pid in worker_parents]
        if not kept:  # no DataLoader workers: the command's own process is still worth a line
            kept = [t.memory for t in tracks if t.memory.pid == self.root_pid]
        kept.sort(key=lambda m: (m.rank if m.rank is not None else -1, m.role != "main", m.pid))
        notes = list(self._notes)
        if any(m.role == "worker" and m.peak_uss_bytes is None for m in kept):
            notes.append("USS/PSS not readable for some workers: their growth is judged on RSS")
        return MemoryReport(
            interval_s=self.interval_s,
            samples=self._ticks,
            shm_total_bytes=self._shm_total,
            shm_peak_used_bytes=self._shm_peak,
            shm_series=list(self._shm),
            processes=kept,
            findings=find_memory_growth(kept),
            notes=notes,
        )


def _start_method(process: object) -> str:
    import psutil

    try:
        cmdline = " ".join(process.cmdline())  # type: ignore[attr-defined]
    except psutil.Error:  # gone, or not ours to read: the start method stays unknown
        return "unknown"
    if "spawn_main" in cmdline:
        return "spawn"
    if "forkserver" in cmdline:
        return "forkserver"
    return "fork"


def _rank(process: object) -> int | None:
    import psutil

    try:
        value = process.environ().get("RANK")  # type: ignore[attr-defined]
    except psutil.Error:  # gone, or not ours to read
        return None
    return int(value) if value and value.isdigit() else None


@dataclass(frozen=True)
class Growth:
    pid: int
    metric: str
    start_bytes: int
    end_bytes: int
    span_s: float
    slope_bytes_per_s: float
    r2: float

    @property
    def grown_bytes(self) -> float:
        return self.slope_bytes_per_s * self.span_s


PRIVATE_FIRST = ((2, "USS"), (3, "PSS"), (1, "RSS"))
RSS_ONLY = ((1, "RSS"),)


def linear_growth(
    memory: ProcessMemory, columns: tuple[tuple[int, str], ...] = PRIVATE_FIRST
) -> Growth | None:
    """Least-squares line through the process's private memory (USS, else PSS, else RSS; or
    the ``columns`` given)."""
    chosen = None
    for column, name in columns:
        points = [(row[0], row[column]) for row in memory.series if row[column] is not None]
        if len(points) >= GROWTH_MIN_POINTS:
            chosen = name
            break
    if chosen is None:
        return None
    xs = [float(p[0]) for p in points]
    ys = [float(p[1]) for p in points]  # type: ignore[arg-type]
    span = xs[-1] - xs[0]
    if span < GROWTH_MIN_SPAN_S:
        return None
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
    syy = sum((y - mean_y) ** 2 for y in ys)
    slope = sxy / sxx if sxx else 0.0
    r2 = (sxy * sxy) / (sxx * syy) if sxx and syy else 0.0
    return Growth(memory.pid, chosen, int(ys[0]), int(ys[-1]), span, slope, r2)


def _grows(growth: Growth | None) -> bool:
    return (
        growth is not None and growth.grown_bytes >= GROWTH_MIN_BYTES and growth.r2 >= GROWTH_MIN_R2
    )


def _mib(value: float) -> str:
    return f"{value / MiB:.0f} MiB"


def find_memory_growth(processes: list[ProcessMemory]) -> list[MemoryFinding]:
    """Workers of one loader whose private memory all grow steadily: copy-on-read or a leak."""
    groups: dict[tuple[int | None, str], list[ProcessMemory]] = {}
    for memory in processes:
        if memory.role == "worker":
            kind = "fork" if memory.start_method in (None, "fork") else "fresh"
            groups.setdefault((memory.parent_pid, kind), []).append(memory)
    copy_on_read: list[Growth] = []
    leaks: list[Growth] = []
    own: list[Growth] = []  # fork workers whose growth is their own objects'
    for (_, kind), workers in sorted(groups.items(), key=lambda item: str(item[0])):
        growths = [(w, linear_growth(w)) for w in workers]
        judged = [(w, g) for w, g in growths if g is not None]
        growing = [(w, g) for w, g in judged if _grows(g)]
        # Copy-on-read touches every worker alike: most of the judged workers must grow.
        if judged and len(growing) * 2 > len(judged):
            for worker, growth in growing:
                if kind != "fork":
                    leaks.append(growth)
                elif _own_objects(worker, growth):
                    own.append(growth)
                else:
                    copy_on_read.append(growth)
    findings = []
    if copy_on_read:
        findings.append(_copy_on_read_finding(copy_on_read))
    if leaks:
        findings.append(_memory_growth_finding(leaks, NOT_FORKED))
    if own:
        findings.append(_memory_growth_finding(own, OWN_OBJECTS))
    findings.extend(_trainer_growth(processes))
    return findings


NOT_FORKED = (
    "The workers were not forked (spawn or forkserver), so this is not copy-on-read: the "
    "Dataset or a transform keeps what it loads (a cache, a list that is appended to, open files)."
)
OWN_OBJECTS = (
    "Each worker's resident memory (RSS) grows with its private memory, so this is not "
    "copy-on-read (which turns pages the worker already shares with the main process private, "
    "and leaves its RSS as it was): each worker allocates and keeps new objects of its own (a "
    "per-worker cache, a list that is appended to)."
)
TRAINER_GROWTH = "trainer-memory-growth"


def _own_objects(worker: ProcessMemory, growth: Growth) -> bool:
    """A fork worker whose RSS grows by at least half its private growth allocates new memory;
    copy-on-read only moves pages it already maps from shared to private."""
    if growth.metric == "RSS":  # no private figures: the two cannot be told apart
        return False
    rss = linear_growth(worker, RSS_ONLY)
    return rss is not None and rss.grown_bytes * 2 >= growth.grown_bytes


def _trainer_growth(processes: list[ProcessMemory]) -> list[MemoryFinding]:
    """A training process whose RSS grows steadily while no worker of its grows a quarter as
    much: the training loop leaks, not the DataLoader (and the OOM killer, told to spare the
    trainer, may still end a worker first)."""
    findings = []
    for main in processes:
        if main.role != "main":
            continue
        children = [w for w in processes if w.parent_pid == main.pid]
        growth = linear_growth(_while_loading(main, children), RSS_ONLY)
        if growth is None or not _grows(growth):
            continue
        workers = [linear_growth(w, RSS_ONLY) for w in children]
        if any(w is not None and w.grown_bytes * 4 > growth.grown_bytes for w in workers):
            continue
        findings.append(
            MemoryFinding(
                id=TRAINER_GROWTH,
                title="The training process's own memory grows steadily (not the DataLoader's)",
                explanation=(
                    "The RSS of the training process itself grows while its DataLoader workers "
                    "stay small: the training loop keeps what it should let go (a list of losses "
                    "kept with their autograd graphs, outputs appended every step, a growing "
                    "cache). Fewer workers do not help."
                ),
                fixes=[
                    "Keep numbers, not tensors with their graphs: `losses.append(loss.item())` "
                    "(or `loss.detach()`), not `losses.append(loss)`.",
                    "Look for lists or dicts in the training loop that grow every step, and "
                    "profile the training process (`memray run train.py`).",
                ],
                pids=[main.pid],
                evidence=[_growth_line(growth).replace("worker pid", "training process pid")],
            )
        )
    return findings


def _copy_on_read_finding(growths: list[Growth]) -> MemoryFinding:
    return MemoryFinding(
        id="copy-on-read",
        title="Every fork worker's private memory grows as it reads the Dataset",
        explanation=(
            "Fork workers share the parent's memory until they write to it, and reading "
            "a Python object writes its reference count. A Dataset that keeps its "
            "metadata (file lists, labels, annotations) in Python lists or dicts makes "
            "each worker copy every page it reads: the memory of the run grows with "
            "workers × dataset size until the OOM killer ends it (PyTorch issue #13246)."
        ),
        fixes=[
            "Keep per-sample metadata in numpy arrays or torch tensors, not Python "
            "lists or dicts: one array object has one reference count, so reading it "
            "copies nothing (strings: np.array(paths).astype(np.bytes_), or one bytes "
            "blob with an offsets array).",
            "Or load the metadata lazily in each worker (worker_init_fn) from a "
            "memory-mapped file instead of building it in the main process.",
            "Fewer workers reduce the total while the Dataset is being fixed.",
        ],
        pids=[g.pid for g in growths],
        evidence=[_growth_line(g) for g in growths],
        docs=COPY_ON_READ_DOCS,
    )


def _memory_growth_finding(growths: list[Growth], explanation: str) -> MemoryFinding:
    return MemoryFinding(
        id="worker-memory-growth",
        title="Every worker's memory grows steadily over the epoch",
        explanation=explanation,
        fixes=[
            "Look for caches and lists in the Dataset that grow in __getitem__; bound "
            "them (functools.lru_cache(maxsize=...)) or drop them.",
            "Run `loaderdoctor env --target ...` to measure one worker's memory per sample.",
        ],
        pids=[g.pid for g in growths],
        evidence=[_growth_line(g) for g in growths],
    )


def _growth_line(growth: Growth) -> str:
    return (
        f"worker pid {growth.pid}: {growth.metric} {_mib(growth.start_bytes)} → "
        f"{_mib(growth.end_bytes)} over {growth.span_s:.1f} s "
        f"(+{growth.slope_bytes_per_s / MiB:.1f} MiB/s, r² {growth.r2:.2f})"
    )


def _while_loading(main: ProcessMemory, workers: list[ProcessMemory]) -> ProcessMemory:
    """The training process's series from its first worker's start to its own peak: its
    imports before and the fall after a kill are no growth of the training loop."""
    starts = [w.series[0][0] for w in workers if w.series]
    begin = min(starts) if starts else 0.0
    rows = [row for row in main.series if row[0] >= begin]
    if rows:
        peak = max(range(len(rows)), key=lambda i: rows[i][1])
        rows = rows[: peak + 1]
    return replace(main, series=rows)


def judge_oom_kills(report: RunReport) -> None:
    """An OOM kill is judged by who grew: where the training process's own growth is the only
    large one, each worker the OOM killer ended says so first (its verdict alone would ask for
    fewer workers, which frees nothing the trainer keeps)."""
    memory = report.memory
    trainer = [f for f in memory.findings if f.id == TRAINER_GROWTH] if memory else []
    if not trainer:
        return
    for incident in report.incidents:
        if incident.cause != "oom-killed":
            continue
        incident.diagnosis.title = (
            "Out of memory: the training process grew, and the kernel killed a worker"
        )
        incident.evidence[0:0] = [
            f"whose memory: {trainer[0].evidence[0]}, the only large growth of the run; the "
            "workers stayed small",
            "OOM protection (the workers' oom_score_adj is raised above the training process's) "
            "made the kernel pick a worker: it died of the training process's growth",
        ]
        incident.fixes[0:0] = [f for f in trainer[0].fixes if f not in incident.fixes]
