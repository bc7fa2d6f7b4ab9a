"""torch's tensor sharing strategy, as healing changes it after the process ran out of descriptors.

Under ``file_descriptor`` (Linux's default) every tensor of a batch crosses from a worker as an
open descriptor, and the main process keeps one per storage it holds: a low ``ulimit -n`` ends
the run (``fd-exhausted``). ``file_system`` passes a shared-memory file's name instead and keeps
no descriptor open: the fix torch's own message gives. The strategy is process-wide; a forked
worker inherits it, a spawned one starts with the default, so a pool started after the switch is
told it (``apply_in_worker``), and only then: unswitched, workers run as torch starts them.
"""

from __future__ import annotations

import torch.multiprocessing

FILE_DESCRIPTOR = "file_descriptor"
FILE_SYSTEM = "file_system"
SWITCH_NOTE = (
    "torch's sharing strategy switched to file_system (tensors cross as named shared-memory "
    "files, not open descriptors); the pool restarts with the same workers"
)


def current() -> str:
    return str(torch.multiprocessing.get_sharing_strategy())


def switch_to(strategy: str) -> str:
    """Switch this process (and the workers it forks from now on) to ``strategy``; the caller
    tells the workers it spawns (``apply_in_worker``). Returns ``strategy``."""
    torch.multiprocessing.set_sharing_strategy(strategy)
    return strategy


def apply_in_worker(strategy: str | None) -> None:
    if strategy is not None and strategy in torch.multiprocessing.get_all_sharing_strategies():
        torch.multiprocessing.set_sharing_strategy(strategy)


__all__ = [
    "FILE_DESCRIPTOR",
    "FILE_SYSTEM",
    "SWITCH_NOTE",
    "apply_in_worker",
    "current",
    "switch_to",
]
