"""The limits on how many processes may start: RLIMIT_NPROC and the pids cgroup.

fork/clone fail with EAGAIN when either is reached; a threads count against both (each thread is
a task), so a process that starts no worker can still use up the room for them.
"""

from __future__ import annotations

import os


def process_limits() -> list[str]:
    """One sentence per limit that could be read (none on a machine without them)."""
    lines = []
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
        shown = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
        exempt = " (not enforced for root)" if os.geteuid() == 0 else ""
        lines.append(f"RLIMIT_NPROC (ulimit -u): {shown}{exempt}")
    except (ImportError, AttributeError, OSError, ValueError):
        pass
    group = pids_cgroup()
    if group is not None:
        maximum, current = group
        lines.append(f"pids cgroup: pids.max {maximum} ({current} tasks in it now)")
    return lines


def pids_cgroup() -> tuple[str, int] | None:
    """``(pids.max, pids.current)`` of this process's pids cgroup (v1 or v2), or None."""
    try:
        with open("/proc/self/cgroup") as handle:
            entries = [line.rstrip("\n").split(":", 2) for line in handle]
    except OSError:
        return None
    for _, controllers, path in entries:
        if "pids" in controllers.split(","):
            base = os.path.join("/sys/fs/cgroup/pids", path.lstrip("/"))
        elif controllers == "":
            base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        else:
            continue
        try:
            with open(os.path.join(base, "pids.max")) as handle:
                maximum = handle.read().strip()
            with open(os.path.join(base, "pids.current")) as handle:
                current = int(handle.read().strip())
        except (OSError, ValueError):
            continue
        return maximum, current
    return None


__all__ = ["pids_cgroup", "process_limits"]
