"""Run a command with every DataLoader it creates supervised, and merge what its processes saw.

The parent never imports torch: it starts the command with the bootstrap first on PYTHONPATH,
forwards signals, samples memory from outside, and after the command has ended (however it
ended) merges the children's files into ``DIR/report.json``.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from loaderdoctor.runner.bootstrap import BOOT_DIR, HANG_TIMEOUT_ENV, HEAL_ENV, RUN_DIR_ENV
from loaderdoctor.runner.memory import MemorySampler
from loaderdoctor.runner.model import (
    Delivered,
    MemoryReport,
    ProcessSummary,
    RunIncident,
    RunReport,
    run_status,
)

REPORT_NAME = "report.json"
INCIDENTS_DIRNAME = ".incidents"  # also in runner/patch.py, which the parent must not import
DEFAULT_REPORT_DIR = "loaderdoctor-report"
DEFAULT_HANG_TIMEOUT_S = 300.0
# Windows has no SIGHUP or SIGQUIT: forward those the platform has.
FORWARDED_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)
PYTHON_NAMES = ("python", "python3")


class RunUsageError(ValueError):
    """The command cannot be started (no such script, no such program): one line for the user."""


@dataclass
class RunSettings:
    command: list[str]
    report_dir: Path = Path(DEFAULT_REPORT_DIR)
    heal: bool = False
    hang_timeout_s: float = DEFAULT_HANG_TIMEOUT_S  # 0 disables the watchdog
    memory_interval_s: float = 0.5


def resolve_command(argv: Sequence[str]) -> list[str]:
    """``script.py ARGS`` is ``python script.py ARGS``; a missing script is a usage error."""
    command = list(argv)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise RunUsageError("no command to run: loaderdoctor run [OPTIONS] -- COMMAND [ARGS...]")
    if command[0].endswith(".py"):
        command = [sys.executable, *command]
    if _is_python(command[0]) and len(command) > 1 and command[1].endswith(".py"):
        if not os.path.isfile(command[1]):
            raise RunUsageError(f"no such script: {command[1]}")
    elif shutil.which(command[0]) is None:
        raise RunUsageError(f"no such command: {command[0]}")
    return command


def _is_python(program: str) -> bool:
    name = os.path.basename(program)
    return program == sys.executable or name.startswith(PYTHON_NAMES)


def child_environment(settings: RunSettings, report_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = BOOT_DIR + (os.pathsep + existing if existing else "")
    env[RUN_DIR_ENV] = str(report_dir)
    env[HANG_TIMEOUT_ENV] = repr(float(settings.hang_timeout_s))
    env[HEAL_ENV] = "1" if settings.heal else "0"
    return env


@contextlib.contextmanager
def forwarding_signals(process: subprocess.Popen[bytes], interrupted: list[int]) -> Iterator[None]:
    """Pass SIGINT/SIGTERM/SIGHUP/SIGQUIT on to the command instead of dying of them.

    A Ctrl-C at a terminal already reaches the command (it is in our process group); sending it
    again would interrupt its clean-up, so a tty signal is forwarded only when we are not the
    terminal's foreground group.
    """

    def forward(number: int, frame: FrameType | None) -> None:
        interrupted.append(number)
        if number in (signal.SIGINT, getattr(signal, "SIGQUIT", None)) and _terminal_delivered_it():
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(number)

    previous: dict[int, Any] = {}
    try:
        for forwarded in FORWARDED_SIGNALS:
            previous[forwarded] = signal.signal(forwarded, forward)
    except ValueError:  # not the main thread: the caller handles signals
        pass
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _terminal_delivered_it() -> bool:
    try:
        with open("/dev/tty") as tty:
            return os.tcgetpgrp(tty.fileno()) == os.getpgrp()
    except OSError:
        return False


def run_command(settings: RunSettings) -> RunReport:
    """Run the command to its end and return (and write) its report."""
    command = resolve_command(settings.command)
    report_dir = settings.report_dir.resolve()
    incidents_dir = report_dir / INCIDENTS_DIRNAME
    shutil.rmtree(incidents_dir, ignore_errors=True)
    incidents_dir.mkdir(parents=True, exist_ok=True)
    started_wall = time.time()
    started = time.monotonic()
    try:
        process = subprocess.Popen(command, env=child_environment(settings, report_dir))
    except OSError as error:
        shutil.rmtree(incidents_dir, ignore_errors=True)
        raise RunUsageError(f"cannot start {command[0]}: {error.strerror or error}") from None
    interrupted: list[int] = []
    sampler = MemorySampler(process.pid, started, settings.memory_interval_s)
    memory: MemoryReport | None = None
    try:
        with forwarding_signals(process, interrupted):
            sampler.start()
            returncode = process.wait()
    finally:
        memory = sampler.stop()
        if process.poll() is None:  # we are being torn down by an exception of our own
            process.kill()
            returncode = process.wait()
        report = merge(
            report_dir,
            command=command,
            returncode=returncode,
            started_wall=started_wall,
            duration_s=time.monotonic() - started,
            memory=memory,
            interrupted=bool(interrupted),
        )
        write_report(report, report_dir)
        shutil.rmtree(incidents_dir, ignore_errors=True)
    return report


def exit_code_of(returncode: int) -> tuple[int, str | None]:
    """A shell's convention: death by signal N is 128 + N."""
    if returncode < 0:
        number = -returncode
        try:
            name: str | None = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return 128 + number, name
    return returncode, None


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with contextlib.suppress(OSError), path.open(errors="replace") as handle:
        for line in handle:
            with contextlib.suppress(ValueError):  # a line cut short by a hard kill
                record = json.loads(line)
                if isinstance(record, dict):
                    yield record


def merge(
    report_dir: Path,
    *,
    command: list[str],
    returncode: int,
    started_wall: float,
    duration_s: float,
    memory: MemoryReport | None,
    interrupted: bool,
) -> RunReport:
    incidents_dir = report_dir / INCIDENTS_DIRNAME
    incidents = [
        RunIncident.from_sink_record(record, started_wall)
        for path in sorted(incidents_dir.glob("*.jsonl"))
        for record in _read_jsonl(path)
    ]
    incidents.sort(key=lambda i: i.time_s if i.time_s is not None else 0.0)
    ranks: list[ProcessSummary] = []
    quarantine: list[Any] = []
    for path in sorted(incidents_dir.glob("*.state.json")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        pid = int(state.get("pid", 0))
        ranks.append(
            ProcessSummary(
                pid=pid,
                rank=state.get("rank"),
                loaders=int(state.get("loaders", 0)),
                delivered=Delivered(int(state.get("batches", 0)), int(state.get("samples", 0))),
                incidents=sum(1 for i in incidents if i.process_pid == pid),
            )
        )
        quarantine.extend(q for q in state.get("quarantine", []) if q not in quarantine)
    for incident in incidents:
        if incident.action == "quarantined":
            quarantine.extend(i for i in incident.indices if i not in quarantine)
    ranks.sort(key=lambda r: (r.rank if r.rank is not None else -1, r.pid))
    exit_code, signal_name = exit_code_of(returncode)
    notes = []
    if not ranks:
        notes.append(
            "no supervised DataLoader was created: the command built none, or its Python ran "
            "without PYTHONPATH (python -I / -E) or without loaderdoctor installed"
        )
    return RunReport(
        status=run_status(exit_code, incidents),
        command=command,
        exit_code=exit_code,
        duration_s=round(duration_s, 3),
        incidents=incidents,
        quarantine=quarantine,
        delivered=Delivered(
            sum(r.delivered.batches for r in ranks), sum(r.delivered.samples for r in ranks)
        ),
        ranks=ranks,
        memory=memory,
        signal=signal_name,
        interrupted=interrupted,
        started_at=datetime.datetime.fromtimestamp(started_wall).isoformat(timespec="seconds"),
        report_dir=str(report_dir),
        notes=notes,
    )


def write_report(report: RunReport, report_dir: Path) -> Path:
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / REPORT_NAME
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(report.to_json(), indent=2, default=repr) + "\n")
    os.replace(temporary, path)
    return path


def load_report(report_dir: Path) -> RunReport:
    path = report_dir / REPORT_NAME if report_dir.is_dir() else report_dir
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise RunUsageError(f"no report at {path}") from None
    except (OSError, ValueError) as error:
        raise RunUsageError(f"cannot read {path}: {error}") from None
    try:
        return RunReport.from_json(data)
    except (TypeError, ValueError, KeyError) as error:
        raise RunUsageError(f"{path} is not a loaderdoctor run report: {error}") from None
