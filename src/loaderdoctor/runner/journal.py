"""One ``run`` per report folder, and the report of a run that did not finish.

``run`` holds an ``flock`` on ``DIR/.run.lock`` while it runs (the kernel releases it however
``run`` ends, ``kill -9`` included), so a second ``run`` into the same folder is refused in one
line instead of deleting the first one's records, and a folder whose lock nobody holds while
``.incidents/`` is still there was left by a run that did not finish. Such a folder's report is
made again from its journal (``run.json``: the command's exit status once it ended) and the
files its processes wrote, by ``loaderdoctor report DIR`` or by the next ``run`` that takes the
folder over; either then removes ``.incidents/``.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from loaderdoctor.runner import protocol
from loaderdoctor.runner.core import (
    RunRecord,
    RunUsageError,
    as_node,
    children_unwritten,
    merge,
    write_report,
)
from loaderdoctor.runner.model import RunReport
from loaderdoctor.runner.protocol import INCIDENTS_DIRNAME, LOCK_NAME, REPORT_NAME, RUN_RECORD_NAME

try:
    import fcntl
except ImportError:  # Windows: no flock; one run per folder is then the user's to keep
    fcntl = None  # type: ignore[assignment]


@dataclass
class Claim:
    """The report folder, held for one ``run``; ``taken_over``: the report of the run that left
    the folder unfinished, made again before this run moves it aside."""

    descriptor: int | None
    taken_over: RunReport | None = None

    def release(self) -> None:
        if self.descriptor is not None:
            os.close(self.descriptor)
            self.descriptor = None


def claim(report_dir: Path, shown: Path) -> Claim:
    """Hold ``report_dir`` for this run, or :class:`RunUsageError` when a live run holds it (or
    it cannot be made or written: a usage error, before the command starts)."""
    if report_dir.exists() and not report_dir.is_dir():
        raise RunUsageError(f"--report-dir {shown} is a file, not a folder")
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunUsageError(
            f"--report-dir {shown}: cannot create it: {error.strerror or error}"
        ) from None
    try:
        # read-only: a descriptor open for writing would keep the mount from turning read-only
        descriptor = os.open(report_dir / LOCK_NAME, os.O_RDONLY | os.O_CREAT, 0o666)
    except OSError as error:
        raise RunUsageError(
            f"--report-dir {shown}: cannot write in it: {error.strerror or error}"
        ) from None
    if not _lock(descriptor):
        os.close(descriptor)
        raise RunUsageError(
            f"--report-dir {shown} is in use by {_holder(report_dir)}: wait for it to end, or "
            "pass another --report-dir"
        )
    held = Claim(descriptor)
    try:
        held.taken_over = settle(report_dir)
    except OSError as error:
        held.release()
        raise RunUsageError(
            f"--report-dir {shown}: an earlier run did not finish there, and its report cannot "
            f"be written ({error.strerror or error}): pass another --report-dir"
        ) from None
    return held


def _lock(descriptor: int) -> bool:
    if fcntl is None:
        return True
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(report_dir: Path) -> str:
    record = _record(report_dir)
    if record is None:
        return "another loaderdoctor run"
    started = datetime.datetime.fromtimestamp(record.started_wall).isoformat(timespec="seconds")
    return f"loaderdoctor run (pid {record.pid}, started {started})"


def _record(report_dir: Path) -> RunRecord | None:
    data = protocol.read_json(report_dir / INCIDENTS_DIRNAME / RUN_RECORD_NAME)
    try:
        return RunRecord.from_dict(data) if data is not None else None
    except (KeyError, TypeError, ValueError):
        return None


def live_run(report_dir: Path) -> bool:
    """Whether a ``run`` holds the folder now (its lock taken); False where there is no lock."""
    if fcntl is None:
        return False
    try:
        descriptor = os.open(report_dir / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)
    return False


def snapshot(report_dir: Path) -> RunReport | None:
    """The report so far of the live run writing into ``report_dir`` (nothing written)."""
    record = _record(report_dir)
    if record is None:
        return None
    report = merge(
        report_dir,
        command=record.command,
        returncode=record.returncode,
        started_wall=record.started_wall,
        duration_s=time.time() - record.started_wall,
        memory=None,
        interrupted=record.interrupted,
    )
    as_node(report, record.node)
    report.supervisor = "running"
    report.notes.insert(
        0,
        f"loaderdoctor run (pid {record.pid}) is still running: this is what its command's "
        "processes had written so far; its own report replaces report.json when it ends",
    )
    return report


def settle(report_dir: Path) -> RunReport | None:
    """The report of the run that left ``.incidents/`` in ``report_dir`` and is gone, made from
    what it left and written as ``report.json``; ``.incidents/`` is removed once it is. None
    where no run was left unfinished. The caller holds the folder (or knows no run does).
    ``OSError`` when the report cannot be written (``.incidents/`` is then kept)."""
    incidents = report_dir / INCIDENTS_DIRNAME
    report = unfinished_report(report_dir)
    if report is not None:
        write_report(report, report_dir)
    if incidents.is_dir():
        shutil.rmtree(incidents, ignore_errors=True)
    return report


def unfinished_report(report_dir: Path) -> RunReport | None:
    """The report of a run that left ``.incidents/`` unmerged (nothing written), or None where
    none did: no such folder, no journal in it, or the run's final report is there and only its
    clean-up was cut short."""
    if not (report_dir / INCIDENTS_DIRNAME).is_dir():
        return None
    record = _record(report_dir)
    if record is None:  # no journal: a run stopped at its start, before its command ran
        return None
    earlier = _earlier_report(report_dir)
    if earlier is not None and earlier.supervisor == "finished":
        return None
    return _made_again(report_dir, record, earlier)


def _earlier_report(report_dir: Path) -> RunReport | None:
    from loaderdoctor.runner.core import load_report

    with contextlib.suppress(RunUsageError):
        return load_report(report_dir / REPORT_NAME)
    return None


def _made_again(report_dir: Path, record: RunRecord, earlier: RunReport | None) -> RunReport:
    returncode, seen = record.returncode, "run saw its command end"
    lifeline = earlier is not None and earlier.supervisor == "died" and earlier.exit_known
    if returncode is None and earlier is not None and lifeline:
        # the command's own process wrote the report when run died, then stopped itself
        number = getattr(signal, earlier.signal or "", None)
        returncode = -int(number) if number is not None else earlier.exit_code
        seen = "the command's process stopped itself after run died"
    last_word = _last_write(report_dir / INCIDENTS_DIRNAME)
    report = merge(
        report_dir,
        command=record.command,
        returncode=returncode,
        started_wall=record.started_wall,
        duration_s=record.duration_s or max(0.0, last_word - record.started_wall),
        memory=None,
        interrupted=record.interrupted,
    )
    report.supervisor = "died"
    as_node(report, record.node)
    report.notes.extend(children_unwritten(report_dir))
    when = datetime.datetime.fromtimestamp(last_word).isoformat(timespec="seconds")
    if returncode is not None:
        note = (
            f"loaderdoctor run (pid {record.pid}) did not finish its report ({seen}); "
            f"this one was made afterwards from what the run and its command's processes wrote "
            "(memory was not sampled)"
        )
    else:
        note = (
            f"loaderdoctor run (pid {record.pid}) did not finish, and nothing saw its command "
            f"end: the exit status is unknown; counts and incidents are those the command's "
            f"processes had written by {when}"
        )
    report.notes.insert(0, note)
    return report


def _last_write(directory: Path) -> float:
    """When the run's processes last wrote (the newest file's modification time)."""
    times = [0.0]
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            with contextlib.suppress(OSError):
                times.append(entry.stat().st_mtime)
    return max(times)
