"""Which job ``loaderdoctor top`` looks at: by its report folder, by a pid, or the one running.

A job is running while the ``loaderdoctor run`` process its folder's ``.incidents/run.json``
names is alive (``run`` removes that folder when it ends). A multi-node job's folder holds one
such folder per node; a pid is the training process, one of its children, or ``run`` itself
(the environment ``run`` hands its command says the folder).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil

from loaderdoctor.runner import protocol

START_HINT = "start it with: loaderdoctor run -- COMMAND"


class TopError(ValueError):
    """No job to look at: one line for the user."""


@dataclass
class Job:
    report_dir: Path
    run_pid: int
    command: list[str]
    started_wall: float
    # (node name or None, the folder that node's run writes): one for a single machine's run
    folders: list[tuple[str | None, Path]]

    def alive(self) -> bool:
        return _alive(self.run_pid)


def find_job(target: str | None) -> Job:
    if target is None:
        return _the_running_job()
    if target.isdigit():
        return _job_of_pid(int(target))
    return _job_at(Path(target))


def _job_at(path: Path) -> Job:
    if not path.exists():
        raise TopError(f"no such folder: {path} (give a job's --report-dir, or its pid)")
    if not path.is_dir():
        raise TopError(f"{path} is not a folder: give a running job's --report-dir, or its pid")
    job = _running_in(path.resolve())
    if job is not None:
        return job
    if (path / protocol.REPORT_NAME).exists():
        raise TopError(
            f"no running job in {path}: its run has ended (loaderdoctor report {path} shows its "
            "report)"
        )
    raise TopError(f"no loaderdoctor run job in {path}: {START_HINT} --report-dir {path}")


def _running_in(folder: Path) -> Job | None:
    """The job running in ``folder`` (a run's folder, or a multi-node job's), or None."""
    single = _run_record(folder)
    if single is not None:
        return Job(folder, single[0], single[1], single[2], [(None, folder)])
    nodes = []
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        record = _run_record(child)
        if record is not None:
            nodes.append((child, record))
    if not nodes:
        return None
    first = min(nodes, key=lambda pair: pair[1][2])[1]
    return Job(folder, first[0], first[1], first[2], [(c.name, c) for c, _ in nodes])


def _run_record(folder: Path) -> tuple[int, list[str], float] | None:
    """(pid, command, start) of the ``run`` writing into ``folder``, while it is alive."""
    data = protocol.read_json(folder / protocol.INCIDENTS_DIRNAME / protocol.RUN_RECORD_NAME)
    try:
        pid = int(data["pid"]) if data else 0
        command = [str(part) for part in data["command"]] if data else []
        started = float(data["started_wall"]) if data else 0.0
    except (KeyError, TypeError, ValueError):
        return None
    return (pid, command, started) if pid and _alive(pid) else None


def _job_of_pid(pid: int) -> Job:
    try:
        process = psutil.Process(pid)
        # the training process (or a worker, a rank), or ``run`` itself: its command's the child
        family = [process, *process.children()]
    except psutil.NoSuchProcess:
        raise TopError(f"no process {pid}: it has ended (or give the job's --report-dir)") from None
    except psutil.Error as error:
        raise TopError(f"cannot look at process {pid}: {error}") from None
    for member in family:
        folder = _run_dir_of(member)
        job = _job_of_run_dir(folder) if folder is not None else None
        if job is not None:
            return job
    raise TopError(f"process {pid} is not running under loaderdoctor run: {START_HINT}")


def _run_dir_of(process: psutil.Process) -> Path | None:
    try:
        value = process.environ().get(protocol.RUN_DIR_ENV)
    except psutil.Error:  # another user's process, or it ended
        return None
    return Path(value) if value else None


def running_jobs() -> list[Job]:
    """Every job this user can see running under ``loaderdoctor run`` on this machine."""
    folders: set[Path] = set()
    for process in psutil.process_iter():
        folder = _run_dir_of(process)
        if folder is not None:
            folders.add(folder)
    jobs: dict[Path, Job] = {}
    for folder in sorted(folders):
        job = _job_of_run_dir(folder)
        if job is not None:
            jobs.setdefault(job.report_dir, job)
    return list(jobs.values())


def _job_of_run_dir(folder: Path) -> Job | None:
    """The job a run's folder belongs to: a node's folder is one of its job's (its parent)."""
    data = protocol.read_json(folder / protocol.INCIDENTS_DIRNAME / protocol.RUN_RECORD_NAME)
    if data is not None and data.get("node"):
        return _running_in(folder.parent)
    return _running_in(folder)


def _the_running_job() -> Job:
    jobs = running_jobs()
    if not jobs:
        raise TopError(
            f"no job running under loaderdoctor run was found: {START_HINT}, or give its "
            "--report-dir or pid"
        )
    if len(jobs) > 1:
        listed = "; ".join(f"{job.report_dir} (run pid {job.run_pid})" for job in jobs)
        raise TopError(f"{len(jobs)} jobs are running, choose one: loaderdoctor top DIR: {listed}")
    return jobs[0]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


__all__ = ["Job", "TopError", "find_job", "running_jobs"]
