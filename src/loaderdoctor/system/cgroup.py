"""cgroup v1 and v2: the memory limit, usage and OOM counters, and the CPU quota of a process.

A container's memory limit, not the host's RAM, is what the kernel OOM killer enforces; and the
``oom_kill`` counter of the cgroup is the one piece of OOM evidence that needs no kernel-log access.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from loaderdoctor.system._files import join_notes, parse_int, parse_key_values, read_text
from loaderdoctor.system.platform import cgroups

# cgroup v1 reports "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712 on 4 KiB pages);
# anything this large is no limit at all.
_UNLIMITED_THRESHOLD = 1 << 60


@dataclass(frozen=True)
class CgroupMount:
    version: int  # 1 or 2
    mount_point: str
    root: str  # the cgroup path the mount shows at mount_point (not "/" inside some containers)
    controllers: frozenset[str]


@dataclass(frozen=True)
class CgroupLocation:
    version: int
    path: str  # as in /proc/<pid>/cgroup
    directory: str  # where its files are
    mount: CgroupMount


@dataclass(frozen=True)
class MemoryCgroup:
    version: int | None
    path: str | None
    limit_bytes: int | None  # the tightest limit of this cgroup and its ancestors; None: no limit
    usage_bytes: int | None
    oom_kill_count: int | None
    oom_count: int | None
    failcnt: int | None
    note: str | None = None
    directory: str | None = None
    own_limit_bytes: int | None = None  # this cgroup's own limit, without its ancestors
    swap_limit_bytes: int | None = None  # v1: memory+swap (memsw); v2: swap alone


@dataclass(frozen=True)
class CpuQuota:
    version: int | None
    path: str | None
    quota_cores: float | None  # None: no quota
    note: str | None = None


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/<pid>/cgroup`` -> ``{controller: path}``; the v2 unified entry is keyed ``""``."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            paths[""] = path
            continue
        for controller in controllers.split(","):
            paths[controller.removeprefix("name=")] = path
    return paths


def parse_mountinfo(text: str) -> list[CgroupMount]:
    """The cgroup and cgroup2 mounts of ``/proc/self/mountinfo``."""
    mounts: list[CgroupMount] = []
    for line in text.splitlines():
        left, separator, right = line.partition(" - ")
        if not separator:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        fstype, super_options = tail[0], tail[2]
        root, mount_point = _unescape(fields[3]), _unescape(fields[4])
        if fstype == "cgroup2":
            mounts.append(CgroupMount(2, mount_point, root, frozenset()))
        elif fstype == "cgroup":
            options = frozenset(option.removeprefix("name=") for option in super_options.split(","))
            mounts.append(CgroupMount(1, mount_point, root, options))
    return mounts


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal (\040 ...).
    return field.encode().decode("unicode_escape") if "\\" in field else field


def locate(
    controller: str, proc_cgroup_text: str, mountinfo_text: str
) -> tuple[CgroupLocation | None, str | None]:
    """Where the ``controller`` files of a process live: v1 if the controller is mounted there, else v2."""
    paths = parse_proc_cgroup(proc_cgroup_text)
    mounts = parse_mountinfo(mountinfo_text)
    candidates: list[tuple[int, str, CgroupMount]] = []
    if controller in paths:
        candidates += [(1, paths[controller], m) for m in mounts if controller in m.controllers]
    if "" in paths:
        candidates += [(2, paths[""], m) for m in mounts if m.version == 2]
    for version, path, mount in candidates:
        directory = _directory(mount, path)
        if version == 2 and not _v2_has(directory, controller):
            continue  # hybrid hierarchy: the unified tree exists but the controller lives in v1
        if os.path.isdir(directory):
            return CgroupLocation(version, path, directory, mount), None
    if not candidates:
        return None, f"no cgroup {controller} controller mounted for this process"
    return None, f"cgroup {controller} directory for {candidates[0][1]} not found"


def _directory(mount: CgroupMount, path: str) -> str:
    relative = path
    if mount.root != "/" and (path == mount.root or path.startswith(mount.root + "/")):
        relative = path[len(mount.root) :]
    return os.path.join(mount.mount_point, relative.lstrip("/")).rstrip("/") or "/"


def _v2_has(directory: str, controller: str) -> bool:
    prefix = {"memory": "memory.max", "cpu": "cpu.max"}.get(controller, f"{controller}.")
    # the root cgroup has no memory.max/cpu.max: look at what its children may get instead
    if os.path.exists(os.path.join(directory, prefix)):
        return True
    controllers = read_text(os.path.join(directory, "cgroup.controllers")).text or ""
    return controller in controllers.split()


def _limit(value: str | None) -> int | None:
    if value is None or value.strip() == "max":
        return None
    number = parse_int(value)
    return None if number is None or number >= _UNLIMITED_THRESHOLD else number


def _ancestors(location: CgroupLocation) -> list[str]:
    """The cgroup's directory and every parent up to its mount point, innermost first."""
    directories = [location.directory]
    current = location.directory
    while current != location.mount.mount_point and current.startswith(location.mount.mount_point):
        current = os.path.dirname(current)
        directories.append(current)
    return directories


def _not_linux() -> str | None:
    """Why there are no cgroups to read, on a platform that has none."""
    if sys.platform.startswith("linux"):
        return None  # on Linux the reads say what exactly could not be read
    return cgroups().why_not


def _read_process_files(pid: int | None) -> tuple[str | None, str | None, str | None]:
    proc = f"/proc/{pid if pid is not None else 'self'}"
    cgroup_file = read_text(f"{proc}/cgroup")
    mountinfo = read_text("/proc/self/mountinfo")
    return cgroup_file.text, mountinfo.text, join_notes(cgroup_file.error, mountinfo.error)


def memory_cgroup(pid: int | None = None) -> MemoryCgroup:
    lacking = _not_linux()
    if lacking is not None:
        return MemoryCgroup(None, None, None, None, None, None, None, lacking)
    proc_cgroup, mountinfo, error = _read_process_files(pid)
    if proc_cgroup is None or mountinfo is None:
        return MemoryCgroup(None, None, None, None, None, None, None, error)
    location, note = locate("memory", proc_cgroup, mountinfo)
    if location is None:
        return MemoryCgroup(None, None, None, None, None, None, None, note)
    if location.version == 1:
        return _memory_v1(location)
    return _memory_v2(location)


def _memory_v1(location: CgroupLocation) -> MemoryCgroup:
    directory = location.directory
    limits = [_limit(read_text(f"{d}/memory.limit_in_bytes").text) for d in _ancestors(location)]
    oom_control = read_text(f"{directory}/memory.oom_control")
    usage = read_text(f"{directory}/memory.usage_in_bytes")
    counters = parse_key_values(oom_control.text) if oom_control.text is not None else {}
    known = [limit for limit in limits if limit is not None]
    return MemoryCgroup(
        version=1,
        path=location.path,
        limit_bytes=min(known) if known else None,
        usage_bytes=parse_int(usage.text),
        # oom_kill appeared in memory.oom_control with Linux 4.13
        oom_kill_count=counters.get("oom_kill"),
        oom_count=None,  # v1 counts no OOM events, only kills (and under_oom, a flag)
        failcnt=parse_int(read_text(f"{directory}/memory.failcnt").text),
        note=join_notes(usage.error, oom_control.error),
        directory=directory,
        own_limit_bytes=limits[0],
        swap_limit_bytes=_limit(read_text(f"{directory}/memory.memsw.limit_in_bytes").text),
    )


def _memory_v2(location: CgroupLocation) -> MemoryCgroup:
    directory = location.directory
    limits = [_limit(read_text(f"{d}/memory.max").text) for d in _ancestors(location)]
    events = read_text(f"{directory}/memory.events")
    usage = read_text(f"{directory}/memory.current")
    counters = parse_key_values(events.text) if events.text is not None else {}
    known = [limit for limit in limits if limit is not None]
    return MemoryCgroup(
        version=2,
        path=location.path,
        limit_bytes=min(known) if known else None,
        usage_bytes=parse_int(usage.text),
        oom_kill_count=counters.get("oom_kill"),
        oom_count=counters.get("oom"),
        failcnt=None,
        note=join_notes(usage.error, events.error),
        directory=directory,
        own_limit_bytes=limits[0],
        swap_limit_bytes=_limit(read_text(f"{directory}/memory.swap.max").text),
    )


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max`` (``"200000 100000"`` -> 2.0 cores; ``"max 100000"`` -> None)."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if period > 0 else None


def cpu_quota(pid: int | None = None) -> CpuQuota:
    lacking = _not_linux()
    if lacking is not None:
        return CpuQuota(None, None, None, lacking)
    proc_cgroup, mountinfo, error = _read_process_files(pid)
    if proc_cgroup is None or mountinfo is None:
        return CpuQuota(None, None, None, error)
    location, note = locate("cpu", proc_cgroup, mountinfo)
    if location is None:
        return CpuQuota(None, None, None, note)
    quotas: list[float] = []
    for directory in _ancestors(location):
        if location.version == 1:
            quota = parse_int(read_text(f"{directory}/cpu.cfs_quota_us").text)
            period = parse_int(read_text(f"{directory}/cpu.cfs_period_us").text)
            if quota is not None and period and quota > 0:
                quotas.append(quota / period)
        else:
            text = read_text(f"{directory}/cpu.max").text
            cores = parse_cpu_max(text) if text is not None else None
            if cores is not None:
                quotas.append(cores)
    return CpuQuota(location.version, location.path, min(quotas) if quotas else None)
