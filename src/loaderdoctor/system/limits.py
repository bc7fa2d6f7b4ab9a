"""Open-file limits: every tensor a worker shares by file descriptor holds one fd until received."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class OpenFiles:
    soft_limit: int | None  # None: unlimited or unknown (see note)
    hard_limit: int | None
    open_now: int | None
    note: str | None = None


def count_open_fds(pid: int | None = None) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid or 'self'}/fd"))
    except OSError:
        pass
    try:  # no /proc (macOS): psutil asks the kernel; Windows counts handles, not descriptors
        process = psutil.Process(pid)
        counter = getattr(process, "num_fds", None)
        return int(counter()) if counter is not None else None
    except (psutil.Error, OSError):
        return None


def process_open_files(pid: int) -> tuple[int, int] | None:
    """(open descriptors, soft RLIMIT_NOFILE) of another live process, from /proc."""
    count = count_open_fds(pid)
    if count is None:
        return None
    try:
        with open(f"/proc/{pid}/limits") as handle:
            for line in handle:
                if line.startswith("Max open files"):
                    soft = line.split()[3]
                    return count, (int(soft) if soft.isdigit() else 1 << 62)
    except (OSError, IndexError):
        return None
    return None


def open_files() -> OpenFiles:
    open_now = count_open_fds()
    note = None if open_now is not None else "cannot count this process's open files"
    try:
        import resource
    except ImportError:
        limits = _limits_from_psutil()
        if limits is None:
            why = (
                "Windows has no RLIMIT_NOFILE (its C runtime allows 8192 open files)"
                if sys.platform == "win32"
                else "the resource module is not available here"
            )
            return OpenFiles(None, None, open_now, why)
        soft, hard, infinity = *limits, psutil.RLIM_INFINITY
    else:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        infinity = resource.RLIM_INFINITY
    return OpenFiles(
        soft_limit=None if soft == infinity else soft,
        hard_limit=None if hard == infinity else hard,
        open_now=open_now,
        note=note,
    )


def _limits_from_psutil() -> tuple[int, int] | None:
    """RLIMIT_NOFILE through psutil (prlimit(2) on Linux), for a Python without ``resource``."""
    rlimit = getattr(psutil.Process, "rlimit", None)
    if rlimit is None or not hasattr(psutil, "RLIMIT_NOFILE"):
        return None
    try:
        soft, hard = rlimit(psutil.Process(), psutil.RLIMIT_NOFILE)
    except (psutil.Error, OSError):
        return None
    return int(soft), int(hard)
