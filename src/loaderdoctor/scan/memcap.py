"""A memory cap per scan worker, so that one sample that eats memory is OOM-killed alone.

Each worker moves itself into its own child memory cgroup (under the scan's own cgroup) with the
cap as its limit: a sample that exceeds it gets a real kernel OOM kill of that worker only, which
the supervised loader diagnoses (kernel log, OOM counters) and isolates like any other death. The
pages a forked worker shares with its parent stay charged to the parent's cgroup (cgroup v1 does
not move charges unless ``memory.move_charge_at_immigrate`` says so), so the cap bounds what the
sample itself allocates.

Where no memory cgroup can be created (not root, cgroup v2 without a delegated subtree), the cap
falls back to ``RLIMIT_AS`` above the worker's address space at start: an allocation past it
raises ``MemoryError`` in the worker, a sample error rather than a kill. Where neither exists
(Windows has no ``resource`` module), the scan runs uncapped and says so.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

from loaderdoctor.system.child_cgroup import set_memory_limit

PREFIX = "loaderdoctor-scan-"


@dataclass
class MemoryCap:
    """The worker_init_fn that applies the cap; picklable, so it also works under spawn."""

    limit_bytes: int
    group_root: str | None  # the scan's cgroup directory; None: RLIMIT_AS
    cgroup_version: int | None = None
    unavailable: str | None = None  # why there is no cap at all

    @property
    def how(self) -> str:
        if self.unavailable is not None:
            return f"no cap: {self.unavailable}"
        if self.group_root is None:
            return "RLIMIT_AS (no memory cgroup could be created)"
        return f"memory cgroup v{self.cgroup_version} per worker"

    def __call__(self, worker_id: int) -> None:
        if self.unavailable is not None:
            return
        if self.group_root is not None:
            try:
                self._enter_cgroup()
                return
            except OSError:
                pass  # the cgroup went away or refused us: the address-space limit still caps
        import resource  # create_cap checked that it exists

        limit = _address_space() + self.limit_bytes
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    def _enter_cgroup(self) -> None:
        assert self.group_root is not None
        group = os.path.join(self.group_root, f"worker-{os.getpid()}")
        os.makedirs(group, exist_ok=True)
        set_memory_limit(group, 1 if self.cgroup_version == 1 else 2, self.limit_bytes)
        _write(group, "cgroup.procs", os.getpid())

    def close(self) -> None:
        """Remove the scan's cgroups; a worker still inside one is killed first."""
        if self.group_root is not None:
            remove_group(self.group_root)


def create_cap(limit_bytes: int) -> MemoryCap:
    """A cap in a fresh cgroup under this process's own memory cgroup, else ``RLIMIT_AS``."""
    from loaderdoctor.system import platform
    from loaderdoctor.system.cgroup import memory_cgroup

    memory = memory_cgroup()
    parent = memory.directory
    if parent is None or memory.version is None or not os.access(parent, os.W_OK):
        rlimit = platform.resource_module()
        if not rlimit:
            reasons = (
                f"{platform.cgroups().why_not or 'no writable memory cgroup'}; {rlimit.why_not}"
            )
            return MemoryCap(limit_bytes, None, unavailable=reasons)
        return MemoryCap(limit_bytes, None)
    prune_stale_groups(parent)
    root = os.path.join(parent, f"{PREFIX}{os.getpid()}")
    try:
        os.makedirs(root, exist_ok=True)
        if memory.version == 2:
            _write(root, "cgroup.subtree_control", "+memory")
    except OSError:
        remove_group(root)
        return MemoryCap(limit_bytes, None)
    return MemoryCap(limit_bytes, root, memory.version)


def prune_stale_groups(parent: str) -> None:
    """Remove the cgroups of scans whose process is gone (a scan that was SIGKILLed)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        owner = name.removeprefix(PREFIX)
        if name.startswith(PREFIX) and owner.isdigit() and not psutil.pid_exists(int(owner)):
            remove_group(os.path.join(parent, name))


def remove_group(root: str, wait_s: float = 5.0) -> None:
    """Kill what is left in ``root``'s worker groups, then remove them and ``root``."""
    deadline = time.monotonic() + wait_s
    while os.path.isdir(root):
        try:
            children = [os.path.join(root, name) for name in os.listdir(root)]
        except OSError:
            return
        for child in children:
            if os.path.isdir(child):
                for pid in _pids(child):
                    try:
                        os.kill(pid, 9)
                    except ProcessLookupError:
                        pass
                try:
                    os.rmdir(child)  # cgroupfs: rmdir, never unlink its control files
                except OSError:
                    pass
        try:
            os.rmdir(root)
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)


def _address_space() -> int:
    return int(psutil.Process().memory_info().vms)


def _write(directory: str, name: str, value: object) -> None:
    with open(os.path.join(directory, name), "w") as handle:
        handle.write(str(value))


def _pids(group: str) -> list[int]:
    try:
        with open(os.path.join(group, "cgroup.procs")) as handle:
            return [int(pid) for pid in handle.read().split()]
    except OSError:
        return []
