"""Child memory cgroups that hold a group of processes to a limit: the kernel stops them there.

A thread that samples memory now and then can see a process past a limit only after it got
there (a 4-worker trial of tune ended at 893 MB against a 770 MB budget, between two looks);
a cgroup's limit is enforced on every page the kernel charges, and an OOM kill inside a child
cgroup picks its victim among that child's processes alone, never among its parent's. Only the
processes that join the child (``JoinCgroup``, run by each of them) are limited: whoever makes
the child stays outside it.

cgroup v1 (``memory.limit_in_bytes``, and ``memory.memsw.limit_in_bytes`` so that swap is no
way around it) and v2 (``memory.max``, ``memory.swap.max``), where this process may create
children of its own memory cgroup: as root, or in a delegated v2 subtree whose parent enables
the memory controller for its children.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from loaderdoctor.system._files import parse_int, parse_key_values, read_text
from loaderdoctor.system.cgroup import memory_cgroup

logger = logging.getLogger(__name__)

PREFIX = "loaderdoctor-limit"
_NAME = re.compile(rf"^{PREFIX}-(?P<pid>\d+)-\d+$")
_REMOVE_TIMEOUT_S = 10.0
_counter = itertools.count()


@dataclass(frozen=True)
class CgroupParent:
    """Where children can be made: this process's own memory cgroup."""

    version: int  # 1 or 2
    directory: str


@dataclass(frozen=True)
class CgroupOutcome:
    """What the kernel counted in a child cgroup: OOM kills, its peak, the kernel log's line."""

    oom_kills: int
    limit_bytes: int
    peak_bytes: int | None  # v1 memory.max_usage_in_bytes, v2 memory.peak (Linux 5.19+)
    limit_hits: int | None  # v1 memory.failcnt, v2 memory.events "max"
    kernel_line: str | None  # the kernel log's OOM line for one of its processes, if readable

    def evidence(self) -> list[str]:
        from loaderdoctor.units import format_bytes

        lines = [f"cgroup limit {format_bytes(self.limit_bytes)}: {self.oom_kills} OOM kill(s)"]
        if self.limit_hits:
            lines.append(f"the limit was reached {self.limit_hits} time(s)")
        if self.peak_bytes is not None:
            lines.append(f"peak charged {format_bytes(self.peak_bytes)}")
        if self.kernel_line is not None:
            lines.append(f"kernel: {self.kernel_line.strip()}")
        return lines


@dataclass(frozen=True)
class JoinCgroup:
    """Moves the calling process into a child cgroup: a ``worker_init_fn``, called first thing
    in each worker (a plain picklable object, so spawn and forkserver workers get it too).

    Only a worker calls it, so the main process stays outside, its pin-memory thread with it
    (a thread of the main process; memory is charged per process, not per thread). The whole
    worker moves (``cgroup.procs``, not one thread's ``tasks``), and whatever it forks later
    is born inside. v1 charges a page to the cgroup of the process that first
    touches it, and moves no charges with the process (``move_charge_at_immigrate`` is 0 in a
    new cgroup), so what the worker allocates from here on counts, and the parent's pages it
    shares stay the parent's.
    """

    procs_file: str

    def __call__(self, _worker_id: int = 0) -> None:
        with open(self.procs_file, "w") as handle:
            handle.write(str(os.getpid()))


@dataclass
class ChildCgroup:
    version: int
    directory: str
    limit_bytes: int
    pids_seen: set[int]

    def join(self) -> JoinCgroup:
        return JoinCgroup(os.path.join(self.directory, "cgroup.procs"))

    def members(self) -> list[int]:
        text = read_text(os.path.join(self.directory, "cgroup.procs")).text or ""
        pids = [int(pid) for pid in text.split() if pid.isdigit()]
        self.pids_seen.update(pids)
        return pids

    def oom_kills(self) -> int:
        if self.version == 1:
            text = read_text(os.path.join(self.directory, "memory.oom_control")).text
        else:
            text = read_text(os.path.join(self.directory, "memory.events")).text
        return parse_key_values(text or "").get("oom_kill", 0)

    def outcome(self, pids: set[int] | None = None) -> CgroupOutcome:
        """The kernel's counters; with an OOM kill, the kernel log's line for it (read then)."""
        kills = self.oom_kills()
        if self.version == 1:
            peak = parse_int(read_text(f"{self.directory}/memory.max_usage_in_bytes").text)
            hits = parse_int(read_text(f"{self.directory}/memory.failcnt").text)
        else:
            peak = parse_int(read_text(f"{self.directory}/memory.peak").text)
            events = parse_key_values(read_text(f"{self.directory}/memory.events").text or "")
            hits = events.get("max")
        line = self._kernel_line((pids or set()) | self.pids_seen) if kills else None
        return CgroupOutcome(kills, self.limit_bytes, peak, hits, line)

    def _kernel_line(self, pids: set[int]) -> str | None:
        from loaderdoctor.system.kmsg import oom_kills, read_kernel_log

        log = read_kernel_log()
        name = os.path.basename(self.directory)
        found = [
            kill
            for kill in oom_kills(log.lines)
            if kill.pid in pids or (kill.memcg is not None and name in kill.memcg)
        ]
        return found[-1].line if found else None


def child_cgroup_parent() -> tuple[CgroupParent | None, str]:
    """This process's memory cgroup when children with a limit can be made in it, else None;
    and where they go, or why not (said in a report: without it a limit is only watched)."""
    own = memory_cgroup()
    if own.directory is None or own.version is None:
        return None, f"no memory cgroup to make a child of ({own.note or 'none found'})"
    parent = CgroupParent(own.version, own.directory)
    if not os.access(own.directory, os.W_OK):
        who = "root" if os.geteuid() != 0 else "write access"
        return None, f"cannot make a child of memory cgroup {own.path} (needs {who})"
    remove_stale(parent)
    try:
        with child_cgroup(parent, 1 << 30):
            pass
    except OSError as error:
        return None, f"cannot make a child of memory cgroup {own.path}: {error.strerror or error}"
    return parent, f"cgroup v{own.version}, children of {own.path}"


@contextmanager
def child_cgroup(parent: CgroupParent, limit_bytes: int) -> Iterator[ChildCgroup]:
    """A new child of ``parent`` limited to ``limit_bytes``; at the end (an error and a
    KeyboardInterrupt included) what is left in it is killed and it is removed."""
    directory = os.path.join(parent.directory, f"{PREFIX}-{os.getpid()}-{next(_counter)}")
    if parent.version == 2:
        _enable_memory_controller(parent.directory)
    os.mkdir(directory)
    group = ChildCgroup(parent.version, directory, limit_bytes, set())
    try:
        _set_limit(group)
        yield group
    finally:
        remove(group)


def _enable_memory_controller(directory: str) -> None:
    """v2 gives a child the memory controller only when its parent's subtree_control names it;
    in a parent that holds processes itself the kernel refuses (EBUSY): no child then."""
    control = os.path.join(directory, "cgroup.subtree_control")
    if "memory" in (read_text(control).text or "").split():
        return
    with open(control, "w") as handle:
        handle.write("+memory")


def _set_limit(group: ChildCgroup) -> None:
    set_memory_limit(group.directory, group.version, group.limit_bytes)


def set_memory_limit(directory: str, version: int, limit_bytes: int) -> None:
    """Hold the cgroup at ``directory`` (v1 or v2) to ``limit_bytes``, swap no way around it."""
    limit = str(max(limit_bytes, 0))
    if version == 1:
        _write(directory, "memory.limit_in_bytes", limit)
        # memory+swap may not be set below memory alone; without swap accounting it is absent
        _write(directory, "memory.memsw.limit_in_bytes", limit, optional=True)
    else:
        _write(directory, "memory.max", limit)
        _write(directory, "memory.swap.max", "0", optional=True)


def _write(directory: str, name: str, value: str, *, optional: bool = False) -> None:
    path = os.path.join(directory, name)
    if optional and not os.path.exists(path):
        return
    with open(path, "w") as handle:
        handle.write(value)


def remove(group: ChildCgroup, timeout_s: float = _REMOVE_TIMEOUT_S) -> bool:
    """Kill what is left in ``group`` (only processes that joined it: ours), then remove it.

    False, and a warning logged, when it could not be removed within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        for pid in group.members():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.rmdir(group.directory)
            return True
        except FileNotFoundError:
            return True
        except OSError as error:
            if time.monotonic() > deadline:
                logger.warning("loaderdoctor: cgroup %s not removed: %s", group.directory, error)
                return False
            time.sleep(0.02)


def remove_stale(parent: CgroupParent) -> None:
    """Children left by a process of ours that was killed before it could remove them."""
    try:
        names = os.listdir(parent.directory)
    except OSError:
        return
    for name in names:
        match = _NAME.match(name)
        if match is None or _alive(int(match.group("pid"))):
            continue
        group = ChildCgroup(parent.version, os.path.join(parent.directory, name), 0, set())
        remove(group, timeout_s=1.0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
