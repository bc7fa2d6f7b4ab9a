"""Run a command with every DataLoader it creates supervised, and merge what its processes saw.

The parent never imports torch: it starts the command with the bootstrap first on PYTHONPATH,
forwards signals, samples memory from outside, and after the command has ended (however it
ended) merges the children's files into ``DIR/report.json``. A report is on disk from the start
(it says the supervisor died, which stays true only if nothing replaces it), and should ``run``
be killed outright, the command writes it and stops (``lifeline``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, cast

from loaderdoctor.atomic import write_json_atomically
from loaderdoctor.forensics.incident import FollowUp, Incident
from loaderdoctor.jsonshape import check_shape
from loaderdoctor.runner import protocol
from loaderdoctor.runner.deaths import DeathWatch
from loaderdoctor.runner.memory import MemorySampler, judge_oom_kills
from loaderdoctor.runner.model import (
    UNKNOWN_EXIT_CODE,
    Delivered,
    MemoryReport,
    NodeInfo,
    ProcessDeath,
    ProcessSummary,
    RunReport,
    UnsupervisedLoader,
    run_status,
)
from loaderdoctor.runner.pdeathsig import parent_death_signal
from loaderdoctor.runner.protocol import (
    BOOT_DIR,
    HANG_TIMEOUT_ENV,
    HEAL_ENV,
    INCIDENTS_DIRNAME,
    MAX_DEATHS_ENV,
    MAX_SKIPPED_ENV,
    REPORT_NAME,
    RUN_DIR_ENV,
    RUN_RECORD_NAME,
    SUPERVISOR_ENV,
)
from loaderdoctor.system.zombie import signal_name

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
    max_skipped: str | None = None  # a count or a fraction, as --max-skipped gave it
    max_deaths_in_a_row: int | None = None  # --max-deaths-in-a-row; None: the loader's default
    strict: bool = False  # silent data bugs raise instead of warning
    memory_interval_s: float = 0.5
    node: NodeInfo | None = None  # one node of a multi-node job: report_dir is its own folder


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


def outer_supervisor() -> tuple[int, str] | None:
    """``(pid, report dir)`` of the ``loaderdoctor run`` this process already runs under, if any.

    Its environment says so, and that process must still be one of our ancestors: a variable
    left behind by a finished run (exported into a shell) is not a supervisor.
    """
    import psutil

    value, report_dir = os.environ.get(SUPERVISOR_ENV, ""), os.environ.get(RUN_DIR_ENV)
    if not value.isdigit() or not report_dir:
        return None
    try:
        ancestors = {parent.pid for parent in psutil.Process().parents()}
    except psutil.Error:
        return None
    return (int(value), report_dir) if int(value) in ancestors else None


def exec_under_outer_supervisor(command: list[str]) -> NoReturn:
    """Become ``command`` (``os.execvp``): the outer run supervises it, one report for both."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except OSError as error:
        raise RunUsageError(f"cannot start {command[0]}: {error.strerror or error}") from None


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
    if settings.max_skipped is not None:
        env[MAX_SKIPPED_ENV] = settings.max_skipped
    else:
        env.pop(MAX_SKIPPED_ENV, None)
    if settings.max_deaths_in_a_row is not None:
        env[MAX_DEATHS_ENV] = str(settings.max_deaths_in_a_row)
    else:
        env.pop(MAX_DEATHS_ENV, None)
    env[SUPERVISOR_ENV] = str(os.getpid())
    if settings.strict:
        env[protocol.STRICT_DATA_ENV] = "1"
    # Ray workers of a cluster started before run: reached through Ray's own hooks (ray_hook)
    user_hook = env.get(protocol.RAY_ENV_HOOK_ENV)
    if user_hook and user_hook != protocol.RAY_ENV_HOOK:
        env[protocol.RAY_USER_ENV_HOOK_ENV] = user_hook
    env[protocol.RAY_ENV_HOOK_ENV] = protocol.RAY_ENV_HOOK
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
    """Run the command to its end and return (and write) its report.

    Once the command has started, nothing that happens to the report folder (full, read-only,
    its permissions taken away) changes the command's outcome: each write that fails is said
    once on stderr and in the report's notes, and ``run`` still exits with the command's code.
    """
    command = resolve_command(settings.command)
    report_dir = prepare_report_dir(settings.report_dir)
    started_wall = time.time()
    started = time.monotonic()
    if settings.node is not None:
        settings.node.started_wall = started_wall
    record = RunRecord(os.getpid(), command, started_wall, settings.node)
    try:
        write_record(record, report_dir)
        # Replaced when run ends; should run be killed first, it says so and claims no outcome.
        write_report(_report_of_a_dead_supervisor(report_dir, record, writer=None), report_dir)
    except OSError as error:
        _discard_run_files(report_dir)
        raise RunUsageError(
            f"--report-dir {settings.report_dir}: cannot write in it: {error.strerror or error}"
        ) from None
    try:
        process = subprocess.Popen(
            command,
            env=child_environment(settings, report_dir),
            # Never outlive us (torchrun's contract): see runner/lifeline.py.
            preexec_fn=parent_death_signal(signal.SIGTERM),
        )
    except OSError as error:
        _discard_run_files(report_dir)
        raise RunUsageError(f"cannot start {command[0]}: {error.strerror or error}") from None
    interrupted: list[int] = []
    deaths = DeathWatch()
    sampler = MemorySampler(process.pid, started, settings.memory_interval_s, on_process=deaths.saw)
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
        report = _finish(
            report_dir, record, returncode, started, memory, bool(interrupted), deaths.deaths()
        )
    return report


def _finish(
    report_dir: Path,
    record: RunRecord,
    returncode: int,
    started: float,
    memory: MemoryReport | None,
    interrupted: bool,
    process_deaths: Sequence[ProcessDeath] = (),
) -> RunReport:
    """The command ended: its exit status in the journal first (should run be killed between
    here and its report, ``loaderdoctor report DIR`` has it), then the report, then the clean-up
    of the records it was made from. A write that fails is said, never raised."""
    unwritten = UnwrittenFiles(report_dir)
    record.returncode = returncode
    record.duration_s = round(time.monotonic() - started, 3)
    record.interrupted = interrupted
    unwritten.attempt(RUN_RECORD_NAME, lambda: write_record(record, report_dir))
    report = merge(
        report_dir,
        command=record.command,
        returncode=returncode,
        started_wall=record.started_wall,
        duration_s=record.duration_s,
        memory=memory,
        interrupted=interrupted,
        process_deaths=process_deaths,
    )
    as_node(report, record.node)
    report.notes.extend(children_unwritten(report_dir))
    if unwritten.attempt(REPORT_NAME, lambda: write_report(report, report_dir)):
        shutil.rmtree(report_dir / INCIDENTS_DIRNAME, ignore_errors=True)
    report.notes.extend(unwritten.notes())
    report.unwritten = [name for name, _ in unwritten.failed]
    return report


def write_record(record: RunRecord, report_dir: Path) -> None:
    protocol.write_json(str(report_dir / INCIDENTS_DIRNAME / RUN_RECORD_NAME), record.to_dict())


def _discard_run_files(report_dir: Path) -> None:
    """A run that never started its command leaves nothing behind."""
    shutil.rmtree(report_dir / INCIDENTS_DIRNAME, ignore_errors=True)
    with contextlib.suppress(OSError):
        (report_dir / REPORT_NAME).unlink(missing_ok=True)


class UnwrittenFiles:
    """The report folder's writes that failed after the command started: said once on stderr
    (the command's own output stays readable), then in the report's notes."""

    def __init__(self, report_dir: Path) -> None:
        self.report_dir = report_dir
        self.failed: list[tuple[str, str]] = []

    def attempt(self, name: str, write: Callable[[], object]) -> bool:
        try:
            write()
        except OSError as error:
            reason = error.strerror or str(error)
            if not self.failed:
                sys.stderr.write(
                    f"loaderdoctor run: warning: cannot write {name} in {self.report_dir} "
                    f"({reason}); the command's outcome and exit status stay its own\n"
                )
                sys.stderr.flush()
            self.failed.append((name, reason))
            return False
        return True

    def notes(self) -> list[str]:
        if not self.failed:
            return []
        names = ", ".join(f"{name} ({reason})" for name, reason in self.failed)
        names += (
            "; the counts and incidents are those the command's processes could write before: "
            "they may be short"
        )
        kept = (
            f"; what the command's processes wrote is kept in {INCIDENTS_DIRNAME}/: once the "
            f"folder can be written, loaderdoctor report {self.report_dir} makes the report"
            if any(name == REPORT_NAME for name, _ in self.failed)
            else ""
        )
        return [f"not written in {self.report_dir}: {names}{kept}"]


def children_unwritten(report_dir: Path) -> list[str]:
    """What the command's processes said they could not write (their counts may be short)."""
    states = protocol.read_states(protocol.incidents_dir(report_dir))
    failed = sorted({str(s["unwritten"]) for s in states if s.get("unwritten")})
    return [
        f"a process of the command could not write its records in {INCIDENTS_DIRNAME}/ "
        f"({reason}): its incidents or counts may be missing from this report"
        for reason in failed
    ]


def as_node(report: RunReport, node: NodeInfo | None) -> None:
    """A node's report says which node it is, and where the job's report comes from."""
    if node is None:
        return
    report.node = node
    job_dir = Path(report.report_dir).parent
    report.notes.append(
        f"{node.name} is one node of a multi-node job: loaderdoctor report {job_dir} merges "
        "every node's report into one"
    )


@dataclass
class RunRecord:
    """The run's journal, ``.incidents/run.json``: what the parent knows, on disk as soon as it
    knows it (its pid and command at the start; the command's exit status the moment it ended),
    for a child that outlives it and for ``loaderdoctor report DIR`` after a killed run."""

    pid: int
    command: list[str]
    started_wall: float
    node: NodeInfo | None = None
    returncode: int | None = None  # Popen's: -N after signal N; None until the command ended
    duration_s: float | None = None
    interrupted: bool = False

    def to_dict(self) -> dict[str, Any]:
        node = dataclasses.asdict(self.node) if self.node is not None else None
        return {
            "pid": self.pid,
            "command": self.command,
            "started_wall": self.started_wall,
            "node": node,
            "returncode": self.returncode,
            "duration_s": self.duration_s,
            "interrupted": self.interrupted,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        node = data.get("node")
        returncode, duration = data.get("returncode"), data.get("duration_s")
        return cls(
            int(data["pid"]),
            [str(part) for part in data["command"]],
            float(data["started_wall"]),
            NodeInfo(**node) if isinstance(node, dict) else None,
            int(returncode) if returncode is not None else None,
            float(duration) if duration is not None else None,
            bool(data.get("interrupted", False)),
        )


def report_after_supervisor_death(
    report_dir: str | os.PathLike[str], supervisor: int, writer: int
) -> RunReport | None:
    """The report a child writes when ``run`` (pid ``supervisor``) died before the command.

    None when ``run`` did finish its own report (its ``.incidents`` folder is gone), or when the
    folder is another run's.
    """
    data = protocol.read_json(os.path.join(protocol.incidents_dir(report_dir), RUN_RECORD_NAME))
    try:
        record = RunRecord.from_dict(data or {})
    except (KeyError, TypeError, ValueError):
        return None
    if record.pid != supervisor:
        return None
    return _report_of_a_dead_supervisor(Path(report_dir), record, writer=writer)


def _report_of_a_dead_supervisor(
    report_dir: Path, record: RunRecord, writer: int | None
) -> RunReport:
    report = merge(
        report_dir,
        command=record.command,
        # the lifeline's process stops itself with SIGTERM; with no writer, nobody saw the end
        returncode=-signal.SIGTERM if writer is not None else None,
        started_wall=record.started_wall,
        duration_s=time.time() - record.started_wall,
        memory=None,
        interrupted=False,
    )
    report.supervisor = "died"
    as_node(report, record.node)
    if writer is None:
        note = (
            f"loaderdoctor run (pid {record.pid}) wrote this report when it started the command "
            "and did not finish (killed, out of memory, or the machine stopped): the command's "
            f"exit status is unknown; loaderdoctor report {report_dir} makes the report from "
            "what the command's processes wrote"
        )
    else:
        note = (
            f"loaderdoctor run (pid {record.pid}) died before its command (killed with SIGKILL, "
            f"or out of memory): the command's process {writer} wrote this report and then "
            "stopped itself with SIGTERM; memory was not sampled"
        )
    report.notes.insert(0, note)
    return report


def prepare_report_dir(path: Path) -> Path:
    """The report folder, made and proven writable, before the command starts.

    A folder that cannot hold the report is the user's to fix (a file in the way, ``/proc``, a
    read-only mount): one line now, not a training run that ends without its report.
    """
    report_dir = path.resolve()
    if report_dir.exists() and not report_dir.is_dir():
        raise RunUsageError(f"--report-dir {path} is a file, not a folder")
    incidents_dir = report_dir / INCIDENTS_DIRNAME
    try:
        shutil.rmtree(incidents_dir, ignore_errors=True)
        incidents_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunUsageError(
            f"--report-dir {path}: cannot create it: {error.strerror or error}"
        ) from None
    try:
        with tempfile.TemporaryFile(dir=report_dir):
            pass
    except OSError as error:
        raise RunUsageError(
            f"--report-dir {path}: cannot write in it: {error.strerror or error}"
        ) from None
    return report_dir


def exit_code_of(returncode: int) -> tuple[int, str | None]:
    """A shell's convention: death by signal N is 128 + N."""
    if returncode < 0:
        return 128 - returncode, signal_name(-returncode)
    return returncode, None


def quarantine_of(states: list[dict[str, Any]], incidents: list[Any]) -> list[Any]:
    """Every index quarantined by any process (its state) or incident, once each, in order."""
    quarantine: list[Any] = []
    for state in states:
        quarantine.extend(q for q in state.get("quarantine", []) if q not in quarantine)
    for incident in incidents:
        if incident.action == "quarantined":
            quarantine.extend(i for i in incident.indices if i not in quarantine)
    quarantine.sort(key=protocol.numeric_order)
    return quarantine


def merge(
    report_dir: str | os.PathLike[str],
    *,
    command: list[str],
    returncode: int | None,
    started_wall: float,
    duration_s: float,
    memory: MemoryReport | None,
    interrupted: bool,
    process_deaths: Sequence[ProcessDeath] = (),
) -> RunReport:
    """The report of what the command's processes wrote under ``report_dir``; ``returncode``
    None: nobody saw the command end (its exit status is said to be unknown, not guessed).
    ``process_deaths``: what ``run`` saw die uncollected in the tree (a worker an incident
    names is not repeated there)."""
    incidents_dir = protocol.incidents_dir(report_dir)
    states = protocol.read_states(incidents_dir)
    incidents = read_incidents(incidents_dir, started_wall)
    ranks = process_summaries(states, incidents)
    quarantine = quarantine_of(states, incidents)
    if returncode is None:
        exit_code, ended_by = UNKNOWN_EXIT_CODE, None
    else:
        exit_code, ended_by = exit_code_of(returncode)
    unsupervised_loaders = unsupervised_loaders_of(states)
    unreached = unreached_ray_workers(states)
    delivered = Delivered(
        sum(r.delivered.batches for r in ranks), sum(r.delivered.samples for r in ranks)
    )
    report = RunReport(
        status=run_status(exit_code, incidents, delivered.samples),
        command=command,
        exit_code=exit_code,
        duration_s=round(duration_s, 3),
        incidents=incidents,
        quarantine=quarantine,
        delivered=delivered,
        ranks=ranks,
        memory=memory,
        signal=ended_by,
        interrupted=interrupted,
        exit_known=returncode is not None,
        started_at=datetime.datetime.fromtimestamp(started_wall).isoformat(timespec="seconds"),
        report_dir=str(report_dir),
        notes=run_notes(states, ranks, unsupervised_loaders, exit_code, unreached),
        unsupervised_loaders=unsupervised_loaders,
        process_deaths=unnamed_deaths(process_deaths, incidents),
        unreached=unreached,
        data_findings=data_findings_of(states),
        oom_protection=protocol.weakest_protection(
            [
                (f"process {r.pid}" + (f" (rank {r.rank})" if r.rank is not None else ""), line)
                for r in ranks
                if (line := r.oom_protection) is not None
            ]
        ),
    )
    judge_oom_kills(report)
    return report


def unnamed_deaths(deaths: Sequence[ProcessDeath], incidents: list[Incident]) -> list[ProcessDeath]:
    """The deaths ``run`` saw in the tree that no incident names (a supervised worker's is one)."""
    named = {incident.pid for incident in incidents}
    return [death for death in deaths if death.pid not in named]


def data_findings_of(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every process's silent data findings, each told once (ranks repeat the same bug)."""
    findings: list[dict[str, Any]] = []
    for state in states:
        for finding in state.get("data_findings", []):
            if isinstance(finding, dict) and finding not in findings:
                findings.append(finding)
    return findings


def run_notes(
    states: list[dict[str, Any]],
    ranks: list[ProcessSummary],
    unsupervised_loaders: list[UnsupervisedLoader],
    exit_code: int,
    unreached: list[str],
) -> list[str]:
    """The run's notes: loaders that ran unsupervised or as plain torch, or no loader at all."""
    notes = [
        f"{u.loader} at {u.site} ran unsupervised{f' ({u.count} times)' if u.count > 1 else ''}: "
        f"{u.reason}"
        for u in unsupervised_loaders
    ]
    notes.extend(unreached)
    hooked = [r for r in ranks if r.reached == "ray-hook"]
    if hooked:
        notes.append(
            f"{sum(r.loaders for r in hooked)} supervised DataLoader(s) in {len(hooked)} Ray "
            "worker process(es) that run did not start were reached through Ray's "
            "worker_process_setup_hook (the job's runtime environment, set by run's "
            "RAY_RUNTIME_ENV_HOOK)"
        )
    if not ranks and not unsupervised_loaders and not unreached:
        notes.append(no_loader_note(states, exit_code))
    for reason, count in unsupervised_reasons(states).items():
        notes.append(
            f"{count} DataLoader(s) ran unsupervised, their batches not in the delivered "
            f"counts: {reason}"
        )
    seen: set[tuple[str, ...]] = set()
    for state in states:
        for entry in state.get("features_off", []):
            if not isinstance(entry, dict):
                continue
            line = tuple(str(entry.get(k)) for k in ("loader", "site", "feature", "reason"))
            if line not in seen:
                seen.add(line)
                notes.append(
                    f"{line[0]} at {line[1]}: {line[2]} turned off (the rest supervised): {line[3]}"
                )
    return notes


def unreached_ray_workers(states: list[dict[str, Any]]) -> list[str]:
    """A driver joined a Ray cluster and not one of its Ray workers wrote a record: their
    DataLoaders, if they built any, ran where run could not see them."""
    joined: list[str] = []
    for state in states:
        joined.extend(str(a) for a in state.get("ray_joined") or [] if str(a) not in joined)
    if not joined or any(state.get("ray_worker") for state in states):
        return []
    return [
        f"DataLoaders in the Ray workers of {', '.join(joined)} were not reached: the command "
        "joined Ray, and run's worker setup hook (Ray's worker_process_setup_hook) wrote no "
        "record from any of its workers: they imported no torch, or the hook could not run "
        "there (the cluster's Python cannot import loaderdoctor, the report folder is not on "
        "that node's disk, or the driver ran under uv run, whose own hook replaces run's); a "
        "DataLoader worker death there is torch's own error, above the summary"
    ]


def unsupervised_reasons(states: list[dict[str, Any]]) -> dict[str, int]:
    """Loaders that ran as plain torch, counted by the reason each gave (its warning's words)."""
    reasons: dict[str, int] = {}
    for state in states:
        entries = state.get("unsupervised_reasons")
        if not isinstance(entries, dict):
            continue
        for reason, count in entries.items():
            if isinstance(count, int):
                reasons[str(reason)] = reasons.get(str(reason), 0) + count
    return reasons


def incident_from_record(record: dict[str, Any], started_wall: float) -> Incident:
    """A line the child wrote (``Incident.to_dict()`` beside its pid, rank and wall time), with
    where and when it happened."""
    data = record.get("incident")
    check_shape(data, Incident, "incident")
    incident = Incident.from_dict(cast(dict[str, Any], data))
    time_s = round(record["time"] - started_wall, 3) if "time" in record else None
    return dataclasses.replace(
        incident, rank=record.get("rank"), process_pid=record.get("pid"), time_s=time_s
    )


def read_incidents(incidents_dir: str, started_wall: float) -> list[Incident]:
    """Every incident line with what was learnt about it later (its follow-up lines), in time
    order."""
    records = list(protocol.read_incident_records(incidents_dir))
    follow_ups: dict[tuple[Any, Any, Any], list[FollowUp]] = {}
    for record in records:
        if isinstance(entry := record.get(protocol.FOLLOW_UP), dict):
            with contextlib.suppress(KeyError, TypeError, ValueError):  # a damaged line
                follow_up = FollowUp.from_dict(entry)
                link = (record.get("pid"), record.get("image"), follow_up.of)
                follow_ups.setdefault(link, []).append(follow_up)
    incidents = []
    for record in records:
        if protocol.FOLLOW_UP in record:
            continue
        try:
            incident = incident_from_record(record, started_wall)
        except (TypeError, ValueError, AttributeError):  # a line damaged after it was written
            continue
        of = record.get("id")
        for follow_up in follow_ups.get((record.get("pid"), record.get("image"), of), []):
            incident = follow_up.merged_into(incident)
        incidents.append(incident)
    incidents.sort(key=lambda i: i.time_s if i.time_s is not None else 0.0)
    return incidents


def no_loader_note(states: list[dict[str, Any]], exit_code: int) -> str:
    """Why no supervised DataLoader was seen: said from what the processes wrote, not guessed."""
    if exit_code == UNKNOWN_EXIT_CODE:  # the command may yet have built one after
        return (
            "no supervised DataLoader had written its counts when this report was made "
            f"({len(states)} process image(s) of the command had imported torch under loaderdoctor)"
        )
    if not states:  # no process of the command imported torch under the bootstrap
        return (
            "no supervised DataLoader was created: no process of the command imported torch "
            "under loaderdoctor (it built none, or its Python ran without PYTHONPATH "
            "(python -I / -E) or without loaderdoctor installed)"
        )
    if exit_code != 0:
        uncaught = [str(s["uncaught"]) for s in states if s.get("uncaught")]
        failed = f"{uncaught[-1]} (its traceback is above the summary)" if uncaught else None
        return (
            f"no supervised DataLoader was created: the command imported torch (DataLoader "
            f"replaced in {len(states)} process image(s)) and exited with code {exit_code} before "
            f"it built one: {failed or 'its own error, above the summary, says what failed'}"
        )
    return "no supervised DataLoader was created: the command imported torch but built none"


def unsupervised_loaders_of(states: list[dict[str, Any]]) -> list[UnsupervisedLoader]:
    """Loaders of a subclass whose __init__ never reached torch's, the same ones counted once."""
    merged: dict[tuple[str, str, str], UnsupervisedLoader] = {}
    for state in states:
        for entry in state.get("unsupervised_loaders", []):
            try:
                loader = UnsupervisedLoader(
                    str(entry["loader"]),
                    str(entry["site"]),
                    str(entry["reason"]),
                    int(entry.get("count", 1)),
                )
            except (KeyError, TypeError, ValueError):
                continue
            key = (loader.loader, loader.site, loader.reason)
            if key in merged:
                merged[key].count += loader.count
            else:
                merged[key] = loader
    return list(merged.values())


def process_summaries(
    states: list[dict[str, Any]], incidents: list[Incident]
) -> list[ProcessSummary]:
    """One summary per process that built a supervised DataLoader, in rank order.

    A process image writes one state; a pid that exec'd has several, and its counts add up.
    """
    by_pid: dict[int, ProcessSummary] = {}
    workers: dict[int, set[int]] = {}
    created: set[int] = set()
    for state in states:
        pid = int(state.get("pid", 0))
        summary = by_pid.setdefault(
            pid,
            ProcessSummary(
                pid=pid,
                rank=state.get("rank"),
                loaders=0,
                delivered=Delivered(),
                incidents=sum(1 for i in incidents if i.process_pid == pid),
            ),
        )
        if int(state.get("created", state.get("loaders", 0))):
            created.add(pid)
        summary.loaders += int(state.get("loaders", 0))
        summary.delivered.batches += int(state.get("batches", 0))
        summary.delivered.samples += int(state.get("samples", 0))
        workers.setdefault(pid, set()).update(int(w) for w in state.get("worker_pids", []))
        summary.workers = len(workers[pid])
        if state.get("oom_protection"):
            summary.oom_protection = str(state["oom_protection"])  # the image that ran last
        if state.get("rank") is not None:
            summary.rank = state.get("rank")
        if state.get("ray_worker") == "ray-hook":
            summary.reached = "ray-hook"
    ranks = [summary for pid, summary in by_pid.items() if pid in created]
    return sorted(ranks, key=lambda r: (r.rank if r.rank is not None else -1, r.pid))


def write_report(report: RunReport, report_dir: str | os.PathLike[str]) -> Path:
    """``DIR/report.json``, replaced whole (a temporary file per writer, then a rename)."""
    return write_json_atomically(Path(report_dir) / REPORT_NAME, report.to_dict(), indent=2)


def load_report(report_dir: Path) -> RunReport:
    from loaderdoctor.inputfile import load_json

    path = report_dir / REPORT_NAME if report_dir.is_dir() else report_dir
    try:
        data = load_json(path)
    except FileNotFoundError:
        raise RunUsageError(f"no report at {path}") from None
    except (OSError, ValueError) as error:
        raise RunUsageError(f"cannot read {path}: {error}") from None
    try:
        return RunReport.from_dict(data)
    except (TypeError, ValueError, KeyError) as error:
        raise RunUsageError(f"{path} is not a loaderdoctor run report: {error}") from None
