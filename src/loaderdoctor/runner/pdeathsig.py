"""The parent-death signal (Linux ``prctl(PR_SET_PDEATHSIG)``): the kernel's half of the lifeline.

``run`` arms it in its command before the exec (``parent_death_signal``); the command's own
``lifeline`` thread takes over from it to write the report first. Apart from ``lifeline`` so that
``core`` (the parent) and ``lifeline`` (the child) share it without importing each other.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def libc_prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` on Linux, looked up before a fork (nothing to import in the child)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def parent_death_signal(number: int) -> Callable[[], None] | None:
    """A ``preexec_fn``: the child gets signal ``number`` when its parent (us) dies."""
    prctl = libc_prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def in_the_child() -> None:
        prctl(PR_SET_PDEATHSIG, number, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), number)

    return in_the_child
