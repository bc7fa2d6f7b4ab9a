"""Collect the evidence about a failed worker: the recorder, the kernel, cgroups, /dev/shm, stacks;
and read the skip/replace events workers write (one JSON line each)."""

from __future__ import annotations

import ast
import io
import json
import logging
import os
import pickle
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FunctionType
from typing import Any

import psutil
import torch

from loaderdoctor import boundary, cpython_compat
from loaderdoctor.forensics.evidence import Evidence
from loaderdoctor.recorder import WorkerSnapshot

logger = logging.getLogger(__name__)

# The OOM killer logs before it kills, but the record can reach /dev/kmsg a moment after the
# parent sees the child gone: look again for this long before concluding "no OOM kill".
KERNEL_LOG_GRACE_S = 1.0


@dataclass
class Baseline:
    """Counters read when the workers start, to compare with after a death."""

    oom_kills: int | None
    note: str | None
    host_oom_kills: int | None = None
    # seconds since boot when the pool started: an OOM kill logged well before then was of
    # another process that had the same pid
    uptime_s: float | None = None


def read_baseline() -> Baseline:
    from loaderdoctor.system import cgroup, kmsg
    from loaderdoctor.system.memory import host_oom_kills

    host, uptime = host_oom_kills(), kmsg.uptime_s()
    try:
        memory = cgroup.memory_cgroup()
    except OSError as error:
        return Baseline(None, f"memory cgroup not readable: {error}", host, uptime)
    except Exception as error:  # a probe must never break the loader, nor pose as the machine
        return Baseline(None, our_failure("reading the memory cgroup", error), host, uptime)
    return Baseline(memory.oom_kill_count, memory.note, host, uptime)


# How much earlier than the pool's start an OOM kill in the kernel log may be and still be of
# its worker: the watch reads the baseline a moment after the workers start, and the kernel
# log's clock and /proc/uptime's may drift apart by a little.
STALE_OOM_MARGIN_S = 10.0


def of_this_worker(lines: list[str], baseline: Baseline | None, ev: Evidence) -> list[str]:
    """The kernel log's lines that name ``ev.pid`` and may be of this worker: one logged well
    before its pool started was of an earlier process with the same pid (pids are reused); an
    OOM kill among those is said in a note."""
    from loaderdoctor.system import kmsg

    started = baseline.uptime_s if baseline is not None else None
    mine = kmsg.lines_for_pid(lines, ev.pid) if ev.pid is not None else []
    if started is None:
        return mine
    fresh = []
    for line in mine:
        logged = kmsg.seconds_of(line)
        if logged is None or logged >= started - STALE_OOM_MARGIN_S:
            fresh.append(line)
            continue
        note = (
            f"the kernel log's OOM kill of pid {ev.pid} at {logged:.1f} s after boot "
            f"predates this pool ({started:.1f} s): it was of an earlier process with the "
            "same pid"
        )
        if kmsg.oom_kills([line]) and note not in ev.notes:  # the log is read again
            ev.notes.append(note)
    return fresh


def our_failure(what: str, error: Exception) -> str:
    """The evidence line for loaderdoctor's own code failing while it read the machine: said as
    an internal error (and logged with its traceback), never as a fact about the machine."""
    logger.error("loaderdoctor: %s failed", what, exc_info=error)
    return (
        f"{what} failed inside loaderdoctor (internal-error, please report it): "
        f"{type(error).__name__}: {error}"
    )


LOG_DIR_PREFIX = "loaderdoctor-"


def remove_log_dir(path: str, owner_pid: int) -> None:
    """The owner's removal of its log directory (``weakref.finalize``)."""
    if os.getpid() == owner_pid:  # never from a forked child that inherited the finalizer
        shutil.rmtree(path, ignore_errors=True)


def make_log_dir() -> str:
    """A private directory for the workers' stack and event logs, named after its owner.

    The owner removes it at shutdown or exit; an owner that was SIGKILLed cannot, so each new
    one first removes the directories of owners that are gone.
    """
    base = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(base) if n.startswith(LOG_DIR_PREFIX)]
    except OSError:
        names = []
    for name in names:
        owner = name[len(LOG_DIR_PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and not psutil.pid_exists(int(owner)):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{LOG_DIR_PREFIX}{os.getpid()}-")


def read_stack_log(log_dir: str | None, worker_id: int, pid: int | None) -> str | None:
    if not log_dir or pid is None:
        return None
    path = boundary.stack_log(log_dir, worker_id, pid)
    try:
        with open(path, errors="replace") as handle:
            text = handle.read().strip()
    except OSError:
        return None
    return text or None


_FRAME_LINE = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')


def exit_frame(stack_log: str | None) -> str | None:
    """``file:line in function``: the innermost frame of the ``sys.exit()`` a worker recorded
    (``boundary.EXIT_HEADER``), the call that ended it; None when it recorded none."""
    if not stack_log or boundary.EXIT_HEADER not in stack_log:
        return None
    frames = [
        match
        for line in stack_log.split(boundary.EXIT_HEADER, 1)[1].splitlines()
        if (match := _FRAME_LINE.match(line))
    ]
    if not frames:
        return None
    filename, line, function = frames[-1].groups()
    return f"{filename}:{line} in {function}"


def sharing_strategy() -> str | None:
    try:
        return str(torch.multiprocessing.get_sharing_strategy())
    except Exception:  # a probe: the verdict stands without it
        return None


def read_bootstrap_markers(log_dir: str | None) -> str | None:
    if not log_dir:
        return None
    try:
        names = boundary.names_of(log_dir, boundary.BOOTSTRAP_PREFIX)
    except OSError:
        return None
    for name in names:
        try:
            with open(os.path.join(log_dir, name)) as handle:
                return handle.read().strip()
        except OSError:
            continue
    return None


def main_script_unguarded() -> tuple[str | None, bool | None]:
    """(the main script, whether it creates or iterates a DataLoader without a main guard)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not os.path.isfile(path):
        return None, None
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            source = handle.read()
    except OSError:
        return path, None
    try:
        from loaderdoctor.lint import check_source

        return path, bool(check_source(source, path, select=["LD101"]))
    except Exception as error:  # the linter is an aid here; fall back to the plain guard check
        logger.error("loaderdoctor: LD101 failed on %s", path, exc_info=error)
        return path, not _has_main_guard(source)


def unguarded_main_line() -> str | None:
    """Where this process's main script, run again by a spawned worker, would reach this call.

    A spawn or forkserver worker re-runs the main script's top level under the name
    ``__mp_main__`` before it loads a sample. When the script's top level reaches this call (an
    epoch starting) outside an ``if __name__ == "__main__":`` block, each worker would run the
    training itself. Read from the stack: the line of the main module's top-level frame, and
    whether that line lies in a guarded block of the script's source. None when it does, or
    when there is no such frame or file (a notebook: spawn has nothing to re-run).
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or not os.path.isfile(path):
        return None
    frame = cpython_compat.caller_frame()
    while frame is not None and not (
        frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)
    ):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return None
    line = frame.f_lineno
    guarded = _guarded_lines(path)
    if guarded is None or any(first <= line <= last for first, last in guarded):
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read().splitlines()[line - 1].strip()
    except (OSError, IndexError):
        text = ""
    return f"line {line} of {path}" + (f" (`{text}`)" if text else "")


def _guarded_lines(path: str) -> list[tuple[int, int]] | None:
    """The line ranges of the script's top-level ``if __name__ == "__main__":`` blocks (None
    when the source cannot be read or parsed: then nothing is said about it)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return None
    return [
        (node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno)
        for node in tree.body
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)
    ]


def defined_in_fileless_main(parts: Sequence[tuple[str, Any]]) -> list[str]:
    """Which of the worker's arguments need a class or function of a ``__main__`` with no file.

    A spawned worker unpickles such a reference by re-importing the main module from its file. A
    notebook's ``__main__`` (Jupyter, Colab) and that of ``python -c`` or a script on stdin have
    none, so the worker dies with "Can't get attribute 'X' on <module '__main__' (built-in)>"
    before it runs a line of ours; pickling succeeded in the parent, so only this tells why.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path and os.path.isfile(path):
        return []
    found = []
    for name, value in parts:
        if value is None:
            continue
        names = _main_references(value)
        if names:
            found.append(f"{name} ({', '.join(sorted(names))})")
    return found


class _MainReferenceFinder(pickle.Pickler):
    """Pickles into nothing, noting each class or function it would reference in ``__main__``."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL)
        self.found: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        # Tensor and array contents do not matter here: do not copy them.
        if isinstance(obj, torch.Tensor | torch.UntypedStorage | torch.TypedStorage):
            return (tuple, ())
        if type(obj).__name__ == "ndarray":
            return (tuple, ())
        if isinstance(obj, type | FunctionType) and getattr(obj, "__module__", None) == "__main__":
            self.found.add(obj.__qualname__)
        return NotImplemented


def _main_references(value: Any) -> set[str]:
    finder = _MainReferenceFinder()
    try:
        finder.dump(value)
    except Exception:  # unpicklable for another reason: what was seen so far still counts
        pass
    return finder.found


def _has_main_guard(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True  # cannot tell: do not accuse
    for node in tree.body:
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            return True
    return False


def add_machine_evidence(ev: Evidence, baseline: Baseline | None) -> None:
    """Kernel log, memory cgroup and /dev/shm, each saying why when it cannot be read."""
    from loaderdoctor.system import cgroup, kmsg, shm
    from loaderdoctor.system.memory import host_oom_kills

    memory: Any = None
    try:
        memory = cgroup.memory_cgroup()
    except OSError as error:
        ev.notes.append(f"memory cgroup not readable: {error}")
    except Exception as error:  # a bug of ours must not hide the verdict
        ev.notes.append(our_failure("reading the memory cgroup", error))
    if memory is not None:
        ev.cgroup_limit_bytes = memory.limit_bytes
        ev.cgroup_oom_kills_after = memory.oom_kill_count
        if baseline is not None:
            ev.cgroup_oom_kills_before = baseline.oom_kills
        if memory.oom_kill_count is None and memory.note:
            ev.notes.append(f"memory cgroup OOM counter not readable: {memory.note}")
    if ev.signal == "SIGKILL" and ev.pid is not None:
        # The OOM killer bumps its counters before it signals the victim. When neither the
        # memory cgroup's nor the machine's counter moved, there is no OOM line to wait for.
        grace = KERNEL_LOG_GRACE_S
        if baseline is not None:
            pairs = (
                (baseline.host_oom_kills, host_oom_kills()),
                (baseline.oom_kills, ev.cgroup_oom_kills_after),
            )
            unchanged = [b == a for b, a in pairs if b is not None and a is not None]
            if unchanged and all(unchanged):
                grace = 0.05
        deadline = time.monotonic() + grace
        while True:
            log = kmsg.read_kernel_log()
            ev.kernel_log_readable = log.readable
            if not log.readable:
                ev.notes.append(f"kernel log not readable: {log.note}")
                break
            mine = of_this_worker(log.lines, baseline, ev)
            kills = [k for k in kmsg.oom_kills(mine) if k.pid == ev.pid]
            if kills:
                ev.oom_kill_for_pid = True
                ev.kernel_log = [k.line for k in kills][-2:]
                break
            if time.monotonic() > deadline:
                ev.kernel_log = mine[-4:]
                break
            time.sleep(0.1)
    try:
        usage = shm.shm_usage()
        ev.shm_total_bytes = usage.total_bytes
        ev.shm_free_bytes = usage.free_bytes
        if usage.total_bytes is None and usage.note:
            ev.notes.append(f"/dev/shm not readable: {usage.note}")
    except OSError as error:
        ev.notes.append(f"/dev/shm not readable: {error}")
    except Exception as error:  # a bug of ours must not hide the verdict
        ev.notes.append(our_failure("reading /dev/shm", error))


def from_snapshot(ev: Evidence, snapshot: WorkerSnapshot | None, iterable: bool) -> None:
    if snapshot is None:
        return
    ev.reached_worker_init = snapshot.reached_init
    ev.stage = snapshot.stage
    if snapshot.rss_bytes:
        ev.worker_rss_bytes = snapshot.rss_bytes
    if iterable:
        if snapshot.stage == "fetch" and snapshot.samples_started:
            ev.iterable_position = snapshot.samples_started - 1
            # named as it passed the pipeline's stages, though it never reached the loader
            if snapshot.named_position == ev.iterable_position:
                ev.stream_key = snapshot.named_key
                if snapshot.named_url and ev.sample_file is None:
                    ev.sample_file = snapshot.named_url
    elif snapshot.stage == "fetch":
        ev.in_flight_index = snapshot.in_flight_index


def sample_event_evidence(event: dict[str, Any], epoch: int, dataset: Any) -> Evidence:
    """The evidence of a skip or replace a worker (or this process) decided alone."""
    from loaderdoctor.supervise.samples import sample_file

    index = event.get("index")
    ev = Evidence(
        kind="exception",
        worker_id=event.get("worker"),
        epoch=epoch,
        stage="collate" if event.get("stage") == "collate" else "fetch",
        in_flight_index=index,
        iterable_position=event.get("position"),
        exception_type=event.get("exception_type"),
        exception_message=event.get("message"),
        traceback=event.get("traceback"),
        errno=event.get("errno"),
        sample_file=sample_file(dataset, index),
    )
    if ev.stage == "collate" and index is not None:
        ev.odd_indices = [index]
    facts = event.get("facts")
    if isinstance(facts, dict):
        facts_from_tags(ev, facts)
    attempts = event.get("attempts") or 1
    if attempts > 1:
        ev.notes.append(f"failed {attempts} times in a row")
    if event.get("action", "skipped") == "replaced":
        ev.notes.append(f"replaced by sample {event.get('substitute')!r}")
    if event.get("note"):
        ev.notes.append(event["note"])
    return ev


def facts_from_tags(ev: Evidence, tags: dict[str, Any]) -> None:
    if not tags:
        return
    ev.stage = tags.get("stage") or ev.stage
    if tags.get("index") is not None:
        ev.in_flight_index = tags["index"]
    if tags.get("position") is not None:
        ev.iterable_position = tags["position"]
    if tags.get("batch"):
        ev.batch_indices = list(tags["batch"])
    if tags.get("odd"):
        ev.odd_indices = list(tags["odd"])
    if tags.get("loaded") is not None:
        ev.last_loaded_index = tags["loaded"]
    if ev.worker_id is None and tags.get("worker") is not None:
        ev.worker_id = tags["worker"]
    if tags.get("root"):
        ev.root_exception = str(tags["root"])
    if tags.get("record_key") is not None and ev.stream_key is None:
        ev.stream_key = tags["record_key"]
    if tags.get("record_url") and ev.sample_file is None:
        ev.sample_file = str(tags["record_url"])


class EventReader:
    """Reads each worker's event file from where it stopped last time; a partial line waits."""

    def __init__(self, log_dir: str, take: Callable[[dict[str, Any]], None]) -> None:
        self.log_dir = log_dir
        self.take = take
        self._offsets: dict[str, int] = {}
        self._seen = 0

    def drain_if_new(self, total: int) -> None:
        """``total`` is the recorder's event counter: read only when it moved."""
        if total != self._seen:
            self._seen = total
            self.drain()

    def drain(self) -> None:
        try:
            names = boundary.names_of(self.log_dir, boundary.EVENTS_PREFIX)
        except OSError:
            return
        for name in names:
            path = os.path.join(self.log_dir, name)
            offset = self._offsets.get(name, 0)
            try:
                with open(path, encoding="utf-8") as handle:
                    handle.seek(offset)
                    text = handle.read()
            except OSError:
                continue
            complete = text[: text.rfind("\n") + 1]
            self._offsets[name] = offset + len(complete.encode("utf-8"))
            for line in complete.splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                self.take(event)
