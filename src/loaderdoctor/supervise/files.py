"""Every file a worker leaves for the parent, by name and format, in one place.

Each supervised iterator has a log directory (``collect.make_log_dir``); its workers write there
and the parent reads what they leave, alive or dead:

* ``worker-{worker_id}-{pid}.log``: faulthandler's stack dumps (a crash, a hang's dump signal);
  a batch the worker could not send (``SEND_ERROR_HEADER`` in ``worker.hooks``, then
  ``UNPICKLABLE_PREFIX`` + where in the batch, when pickling failed); and ``EXIT_HEADER`` with the
  traceback of a ``sys.exit()`` the Dataset called, which ends a worker without an error;
* ``hang-{worker_id}-{pid}.log``: the stack dumped by the watchdog's timer (no dump signal);
* ``stackdump-{worker_id}-{pid}.txt``: how the parent gets the worker's stack when it is stuck
  (first line "signal N", "timer" or "none: why"; then the platform's description);
* ``events-{worker_id}-{pid}.jsonl``: one JSON object a line, the samples it skipped or replaced;
* ``tempdir-{worker_id}-{pid}.txt``: its multiprocessing temp dir, removed if it is killed;
* ``bootstrap-{pid}.txt``: a spawned process re-running an unguarded main script reached the
  loader (in the directory ``$LOADERDOCTOR_BOOTSTRAP_DIR`` names while the pool starts).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

BOOTSTRAP_DIR_ENV = "LOADERDOCTOR_BOOTSTRAP_DIR"
EVENTS_PREFIX = "events-"
TEMPDIR_PREFIX = "tempdir-"
BOOTSTRAP_PREFIX = "bootstrap-"
UNPICKLABLE_PREFIX = "loaderdoctor: cannot be pickled: "  # then "PATH (TYPE)"
EXIT_HEADER = "loaderdoctor: the worker called exit"


@contextlib.contextmanager
def bootstrap_dir(log_dir: str) -> Iterator[None]:
    """``BOOTSTRAP_DIR_ENV`` names ``log_dir`` for the block (a pool starting), then as before."""
    previous = os.environ.get(BOOTSTRAP_DIR_ENV)
    os.environ[BOOTSTRAP_DIR_ENV] = log_dir
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(BOOTSTRAP_DIR_ENV, None)
        else:
            os.environ[BOOTSTRAP_DIR_ENV] = previous


def stack_log(log_dir: str, worker_id: int, pid: int | None) -> str:
    return os.path.join(log_dir, f"worker-{worker_id}-{pid}.log")


def hang_log(log_dir: str, worker_id: int, pid: int | None) -> str:
    return os.path.join(log_dir, f"hang-{worker_id}-{pid}.log")


def stack_dump_how(log_dir: str, worker_id: int, pid: int | None) -> str:
    return os.path.join(log_dir, f"stackdump-{worker_id}-{pid}.txt")


def events_file(log_dir: str, worker_id: int, pid: int) -> str:
    return os.path.join(log_dir, f"{EVENTS_PREFIX}{worker_id}-{pid}.jsonl")


def tempdir_file(log_dir: str, worker_id: int, pid: int) -> str:
    return os.path.join(log_dir, f"{TEMPDIR_PREFIX}{worker_id}-{pid}.txt")


def bootstrap_marker(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{BOOTSTRAP_PREFIX}{pid}.txt")


def names_of(log_dir: str, prefix: str, suffix: str = "") -> list[str]:
    """The names in ``log_dir`` of one kind (``EVENTS_PREFIX``, ...), sorted; OSError when the
    directory cannot be read."""
    return sorted(n for n in os.listdir(log_dir) if n.startswith(prefix) and n.endswith(suffix))


def tempdir_suffix(pid: int | None) -> str:
    """The end of the temp-dir files of the worker ``pid`` (of every worker: None)."""
    return f"-{pid}.txt" if pid is not None else ".txt"


__all__ = [
    "BOOTSTRAP_DIR_ENV",
    "BOOTSTRAP_PREFIX",
    "EVENTS_PREFIX",
    "TEMPDIR_PREFIX",
    "bootstrap_marker",
    "events_file",
    "hang_log",
    "names_of",
    "stack_dump_how",
    "stack_log",
    "tempdir_file",
    "tempdir_suffix",
]
