"""Who the kernel's OOM killer takes first: workers and probes, never the training process.

The OOM killer (host-wide or a memory cgroup's) kills the process with the highest badness: its
resident memory plus ``oom_score_adj`` thousandths of all the memory it may use. A spawned worker
holds as much as the training process (each imports torch again, ~509 MiB under torch 2.14's CUDA
build), so while a dead worker's sample is re-tried alone and its replacement starts, the
training process can be the largest, and it was the one killed. A worker at 900 and a
probe at 1000 outrank any process left at 0 whatever their sizes, the probe (the memory suspect)
first. Raising a process's own value, or a child's of the same user, needs no privilege
(``proc(5)``); the training process's own value is never changed.
"""

from __future__ import annotations

import os
import sys

WORKER_OOM_SCORE_ADJ = 900
PROBE_OOM_SCORE_ADJ = 1000


def raise_oom_score(pid: int, value: int) -> str | None:
    """Set ``/proc/PID/oom_score_adj`` to ``value`` unless it is higher already; None when
    done, else why not (no /proc, the process is gone, refused)."""
    if not sys.platform.startswith("linux"):
        return f"oom_score_adj is Linux's ({sys.platform} has none)"
    path = f"/proc/{pid}/oom_score_adj"
    try:
        with open(path) as handle:
            if int(handle.read().strip() or 0) >= value:
                return None
        with open(path, "w") as handle:
            handle.write(str(value))
    except (OSError, ValueError) as error:
        return f"oom_score_adj of pid {pid} not raised: {error}"
    return None


def oom_score_adj(pid: int | None = None) -> int | None:
    """The current ``oom_score_adj`` of ``pid`` (this process by default), None where unreadable."""
    try:
        with open(f"/proc/{pid or os.getpid()}/oom_score_adj") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def oom_protection(worker: int, probe: int, failures: list[str]) -> str:
    """One sentence for reports and ``env``: whether the protection is on, and how."""
    own = oom_score_adj()
    if failures:
        return f"off for {len(failures)} worker(s): {failures[0]}"
    if own is not None and own >= worker:
        return (
            f"off: the training process's own oom_score_adj is {own}, as high as its workers' "
            f"({worker}); the OOM killer may take it first"
        )
    parent = f"the training process at {own}" if own is not None else "the training process"
    return (
        f"on: workers at oom_score_adj {worker}, samples re-tried alone at {probe}, {parent}: "
        "the OOM killer takes them first"
    )


__all__ = [
    "PROBE_OOM_SCORE_ADJ",
    "WORKER_OOM_SCORE_ADJ",
    "oom_protection",
    "oom_score_adj",
    "raise_oom_score",
]
