"""What this platform lets loaderdoctor reach: one probe per platform-specific piece.

Linux has every piece. macOS has no real-time signals, no ``/proc``, no ``/dev/shm`` to measure,
no cgroups and no ``/dev/kmsg``; Windows also lacks ``faulthandler.register`` and the ``resource``
module. Code that needs one of these asks its probe first: each returns a ``Capability`` that is
available, or not with the reason, which the evidence and ``env`` then quote ("not available here,
because ...") instead of crashing or passing a check they could not make.
"""

from __future__ import annotations

import faulthandler
import importlib
import os
import signal
import sys
from dataclasses import dataclass
from typing import Literal

_PLATFORM_NAMES = {"darwin": "macOS", "win32": "Windows", "linux": "Linux"}


def platform_name() -> str:
    return _PLATFORM_NAMES.get(sys.platform, sys.platform)


@dataclass(frozen=True)
class Capability:
    name: str
    available: bool
    reason: str | None = None  # why not, when not available
    # True when the platform has no such thing at all (macOS has no cgroups), False when it
    # has one that cannot be read here (a /proc/self/cgroup this process may not open)
    absent: bool = False

    def __bool__(self) -> bool:
        return self.available

    @property
    def why_not(self) -> str:
        """``not available here, because ...`` (empty when available)."""
        return "" if self.available else f"{self.name} not available here, because {self.reason}"


def _have(name: str) -> Capability:
    return Capability(name, True)


def _lack(name: str, reason: str, absent: bool = False) -> Capability:
    return Capability(name, False, reason, absent)


def _linux_only(name: str) -> Capability | None:
    if sys.platform.startswith("linux"):
        return None
    return _lack(name, f"it is Linux-only and this is {platform_name()}", absent=True)


def realtime_signals() -> Capability:
    name = "real-time signals"
    if hasattr(signal, "SIGRTMIN"):
        return _have(name)
    return _lack(name, f"signal.SIGRTMIN does not exist on {platform_name()}", absent=True)


def faulthandler_register() -> Capability:
    name = "faulthandler.register"
    if hasattr(faulthandler, "register"):
        return _have(name)
    return _lack(
        name, f"faulthandler cannot dump on a user signal on {platform_name()}", absent=True
    )


def resource_module() -> Capability:
    name = "the resource module (getrlimit)"
    try:
        importlib.import_module("resource")
    except ImportError:
        return _lack(name, f"Python has no resource module on {platform_name()}", absent=True)
    return _have(name)


def _readable(path: str) -> str | None:
    """None when ``path`` (a file or a directory) can be read, else why not."""
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb") as handle:
                handle.read(1)
    except OSError as error:
        return f"{path} cannot be read ({error.strerror or error})"
    return None


def _linux_file(name: str, path: str) -> Capability:
    """A Linux-only source, available where ``path`` (its proof) can be read."""
    lacking = _linux_only(name)
    if lacking is not None:
        return lacking
    why = _readable(path)
    return _have(name) if why is None else _lack(name, why)


def proc_filesystem() -> Capability:
    return _linux_file("/proc", "/proc/self/stat")


def dev_shm() -> Capability:
    name = "/dev/shm"
    if sys.platform == "win32":
        return _lack(name, "Windows shares tensors through file mappings, not /dev/shm", True)
    try:
        os.statvfs("/dev/shm")
    except OSError as error:
        if sys.platform == "darwin":
            return _lack(name, "macOS keeps POSIX shared memory in the kernel, not /dev/shm", True)
        return _lack(name, f"it cannot be measured ({error.strerror or error})")
    return _have(name)


def cgroups() -> Capability:
    return _linux_file("cgroups", "/proc/self/cgroup")


def kernel_log() -> Capability:
    """Only whether this platform has a Linux kernel log at all; reading it may still be refused."""
    name = "the kernel log (/dev/kmsg, dmesg)"
    lacking = _linux_only(name)
    return lacking if lacking is not None else _have(name)


# --- how the parent gets the Python stack of a stuck worker ---------------------------------

# Preferred: a real-time signal, since user code rarely installs handlers for those.
REALTIME_DUMP_OFFSET = 6


@dataclass(frozen=True)
class StackDump:
    """How a stuck worker's Python stack reaches the parent.

    ``signal``: the parent sends ``signal_number`` and faulthandler (registered for it in the
    worker) dumps every thread. ``timer``: the worker arms ``faulthandler.dump_traceback_later``
    for each stage it starts, so the stack is written by the time the parent calls it a hang.
    """

    method: Literal["signal", "timer"]
    signal_number: int | None
    description: str


def stack_dump(user_owns_sigusr2: bool = False) -> StackDump:
    """The best way on this platform (``user_owns_sigusr2``: a handler other than the default)."""
    if faulthandler_register():
        if realtime_signals():
            number = int(signal.SIGRTMIN) + REALTIME_DUMP_OFFSET
            return StackDump("signal", number, f"SIGRTMIN+{REALTIME_DUMP_OFFSET}")
        # macOS: no real-time signal; SIGUSR2 is safe unless the user's code installed a handler.
        if hasattr(signal, "SIGUSR2") and not user_owns_sigusr2:
            return StackDump("signal", int(signal.SIGUSR2), "SIGUSR2")
    return StackDump(
        "timer",
        None,
        "faulthandler.dump_traceback_later in the worker "
        f"({realtime_signals().why_not or faulthandler_register().why_not or 'SIGUSR2 is taken'})",
    )


def capabilities() -> list[Capability]:
    """Every probe, in the order ``env`` lists them."""
    return [
        proc_filesystem(),
        dev_shm(),
        cgroups(),
        kernel_log(),
        resource_module(),
        realtime_signals(),
        faulthandler_register(),
    ]


__all__ = [
    "Capability",
    "StackDump",
    "capabilities",
    "cgroups",
    "dev_shm",
    "faulthandler_register",
    "kernel_log",
    "platform_name",
    "proc_filesystem",
    "realtime_signals",
    "resource_module",
    "stack_dump",
]
