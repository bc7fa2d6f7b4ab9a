"""Open-file limits: every tensor a worker shares by file descriptor holds one fd until received."""

from __future__ import annotations

import os
from dataclasses import dataclass


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
    try:
        import resource
    except ImportError:  # Windows
        return OpenFiles(None, None, None, "the resource module is not available on this platform")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_now = count_open_fds()
    return OpenFiles(
        soft_limit=None if soft == resource.RLIM_INFINITY else soft,
        hard_limit=None if hard == resource.RLIM_INFINITY else hard,
        open_now=open_now,
        note=None if open_now is not None else "cannot list /proc/self/fd",
    )
