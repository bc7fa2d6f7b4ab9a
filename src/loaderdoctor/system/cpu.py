"""CPU cores, affinity and cgroup quota: how many workers the machine can really run at once."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from loaderdoctor.system.cgroup import cpu_quota


@dataclass(frozen=True)
class CpuInfo:
    logical_cores: int | None  # os.cpu_count(): the machine, not what this process may use
    affinity_cores: int | None  # sched_getaffinity: the cores this process may run on
    quota_cores: float | None  # cgroup CPU quota in cores; None: no quota
    usable_cores: int | None  # the least of the above, rounded up: the real parallelism
    note: str | None = None


def cpu_info() -> CpuInfo:
    logical = os.cpu_count()
    affinity: int | None = None
    note: str | None = None
    if hasattr(os, "sched_getaffinity"):
        try:
            affinity = len(os.sched_getaffinity(0))
        except OSError as error:
            note = f"sched_getaffinity failed: {error}"
    else:
        note = "CPU affinity is not available on this platform"
    quota = cpu_quota()
    bounds = [float(value) for value in (logical, affinity, quota.quota_cores) if value is not None]
    usable = max(1, math.ceil(min(bounds))) if bounds else None
    quota_note = quota.note if quota.version is None else None
    return CpuInfo(logical, affinity, quota.quota_cores, usable, note or quota_note)
