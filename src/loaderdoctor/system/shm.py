"""Size and use of ``/dev/shm``, where DataLoader workers put every batch they hand to the parent."""

from __future__ import annotations

import os
from dataclasses import dataclass

# Docker and podman give a container a 64 MiB /dev/shm unless told otherwise (``--shm-size``);
# one batch of images times workers times prefetch routinely needs more.
CONTAINER_DEFAULT_SHM_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ShmUsage:
    path: str
    total_bytes: int | None
    free_bytes: int | None
    used_bytes: int | None
    note: str | None = None


def shm_usage(path: str = "/dev/shm") -> ShmUsage:
    if path == "/dev/shm":
        from loaderdoctor.system.platform import dev_shm

        available = dev_shm()
        if not available:
            return ShmUsage(path, None, None, None, available.why_not)
    if not hasattr(os, "statvfs"):
        return ShmUsage(path, None, None, None, "os.statvfs does not exist on Windows")
    try:
        stats = os.statvfs(path)
    except FileNotFoundError:
        return ShmUsage(path, None, None, None, f"{path} does not exist")
    except OSError as error:
        return ShmUsage(path, None, None, None, f"cannot stat {path}: {error.strerror or error}")
    total = stats.f_blocks * stats.f_frsize
    # f_bavail, not f_bfree: what an unprivileged worker may really allocate.
    free = stats.f_bavail * stats.f_frsize
    used = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    return ShmUsage(path, total, free, used)
