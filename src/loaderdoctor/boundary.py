"""What crosses between a DataLoader worker and the main process, owned in one place.

A worker and the parent share no Python objects after the start: what one tells the other goes
through five channels, and each channel's layout, names and texts are defined here, so that the
writer (``supervise/worker``) and the reader (``supervise/parent``, ``top``, ``runner``) cannot
drift apart. Neither side spells a file name, a header or an offset of its own.

::

    main process                                               worker process
    ------------                                               --------------
    sampler --index--> torch's index queue ------------------> fetch (dataset wrapper)
                                                                  |  collate (collate wrapper)
    ledger <--batch (+ skip/replace events)-- result queue <-----+
      |                                                          |
      |   1. flight recorder (shared memory, one int64 row       |
      |      a worker: Field, Stage; read any time) <------------+ writes in place
      |   2. live quarantine (shared memory, append-only,        |
      +----> index + 1 per entry; main writes) ------------------> read before each sample
          3. exception tags (a note on the exception, MARKER +   |
             JSON: index, stage, worker) <-- torch's traceback --+
          4. the log dir (files named below: stack dumps,        |
             events, temp dir, bootstrap markers) <--------------+ written as they happen,
                                                                    read after a death
          5. texts inside those files (SEND_ERROR_HEADER, EXIT_HEADER, UNPICKLABLE_PREFIX,
             SHARER_FAILED) and the frames of our own threads in a stack dump (STAGE_TIMER_FRAME,
             ORPHAN_GUARD_FRAME), which the parent filters out

Each supervised iterator has a log directory (``collect.make_log_dir``); its workers write there
and the parent reads what they leave, alive or dead:

* ``worker-{worker_id}-{pid}.log``: faulthandler's stack dumps (a crash, a hang's dump signal);
  a batch the worker could not send (``SEND_ERROR_HEADER``, then ``UNPICKLABLE_PREFIX`` + where
  in the batch, when pickling failed); and ``EXIT_HEADER`` with the traceback of a
  ``sys.exit()`` the Dataset called, which ends a worker without an error;
* ``hang-{worker_id}-{pid}.log``: the stack dumped by the watchdog's timer (no dump signal);
* ``stackdump-{worker_id}-{pid}.txt``: how the parent gets the worker's stack when it is stuck
  (first line "signal N", "timer" or "none: why"; then the platform's description);
* ``events-{worker_id}-{pid}.jsonl``: one JSON object a line, the samples it skipped or replaced,
  and the facts a worker reports once (``*_EVENT`` kinds below);
* ``tempdir-{worker_id}-{pid}.txt``: its multiprocessing temp dir, removed if it is killed;
* ``bootstrap-{pid}.txt``: a spawned process re-running an unguarded main script reached the
  loader (in the directory ``$LOADERDOCTOR_BOOTSTRAP_DIR`` names while the pool starts).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from enum import IntEnum


# --- 1. the flight recorder's row (``recorder.FlightRecorder``): one int64 a field -----------
class Field(IntEnum):
    PID = 0
    STAGE = 1
    INDEX = 2  # the sample index being fetched (NO_INDEX when not an int)
    SAMPLES_STARTED = 3  # samples this worker started to fetch, over its life
    BATCHES_DONE = 4  # batches this worker collated, over its life
    STAGE_SINCE_NS = 5  # CLOCK_MONOTONIC (shared by all processes) when the stage began
    RSS_BYTES = 6
    GENERATION = 7  # bumped when a slot is handed to a new worker process
    ERRORS = 8  # Python exceptions raised by the Dataset/collate in this worker
    SEND_ERRORS = 9  # batches lost in the worker's queue feeder thread (pickling, EMFILE, ENOSPC)
    EVENTS = 10  # skip/replace decisions written to the worker's event log
    # A stream item's name, written as it passes through a pipeline's stages (a WebDataset
    # ``__key__`` and ``__url__``) so that an item that kills its worker every time is named too:
    # its stream position + 1 (0: none), then the byte length and the UTF-8 text that follows.
    NAMED_POSITION = 11
    NAME_BYTES = 12
    NAME_TEXT = 13  # the first of NAME_WORDS int64 words holding the text


NAME_WORDS = 48  # 384 bytes: a key and a shard URL; longer ones are cut
N_FIELDS = Field.NAME_TEXT + NAME_WORDS
NO_INDEX = -(2**62)
# The key and the URL, apart, in the text (neither holds a NUL)
NAME_SEPARATOR = "\0"


class Stage(IntEnum):
    NOT_STARTED = 0
    INIT = 1
    IDLE = 2
    FETCH = 3
    COLLATE = 4


STAGE_NAMES = {
    Stage.NOT_STARTED: "not-started",
    Stage.INIT: "init",
    Stage.IDLE: "idle",
    Stage.FETCH: "fetch",
    Stage.COLLATE: "collate",
}

# Plain ints for the workers' per-sample loops, which write the row in place: IntEnum members
# cost an __index__ call per access.
ROW_STAGE = int(Field.STAGE)
ROW_INDEX = int(Field.INDEX)
ROW_SAMPLES = int(Field.SAMPLES_STARTED)
ROW_SINCE = int(Field.STAGE_SINCE_NS)
STAGE_FETCH = int(Stage.FETCH)

# --- 3. the tag on a worker's exception (``worker.exception_tags``) -------------------------
TAG_MARKER = "[loaderdoctor] "  # then one JSON object: index, stage, worker, facts

# --- 5. texts in the worker's stack log, and our own threads' frames in its dumps -----------
SEND_ERROR_HEADER = "loaderdoctor: a batch could not be sent to the main process"
SHARER_FAILED = (
    "the worker's resource sharer could not accept the main process's connection for a "
    "tensor's file descriptor"
)
STAGE_TIMER_FRAME = "in _stage_timer_loop"  # how the timer's own thread shows in its dump
ORPHAN_GUARD_FRAME = "in _orphan_guard_loop"

# The kinds of the facts a worker reports once in its event file (beside skip and replace)
RNG_STATES_EVENT = "rng-states"
SHARED_HANDLE_EVENT = "shared-handle"
FEATURE_OFF_EVENT = "feature-off"

# --- 4. the log dir's files -----------------------------------------------------------------
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
    "EXIT_HEADER",
    "FEATURE_OFF_EVENT",
    "NAME_SEPARATOR",
    "NAME_WORDS",
    "NO_INDEX",
    "N_FIELDS",
    "ORPHAN_GUARD_FRAME",
    "RNG_STATES_EVENT",
    "ROW_INDEX",
    "ROW_SAMPLES",
    "ROW_SINCE",
    "ROW_STAGE",
    "SEND_ERROR_HEADER",
    "SHARED_HANDLE_EVENT",
    "SHARER_FAILED",
    "STAGE_FETCH",
    "STAGE_NAMES",
    "STAGE_TIMER_FRAME",
    "TAG_MARKER",
    "TEMPDIR_PREFIX",
    "UNPICKLABLE_PREFIX",
    "Field",
    "Stage",
    "bootstrap_marker",
    "events_file",
    "hang_log",
    "names_of",
    "stack_dump_how",
    "stack_log",
    "tempdir_file",
    "tempdir_suffix",
]
