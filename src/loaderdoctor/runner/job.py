"""One job report from the node folders of a multi-node ``loaderdoctor run``.

Every node's run wrote ``DIR/<node>/report.json`` (``runner.node``); the job report is a
``RunReport`` too, so that whatever reads one run's report reads the job's: its incidents and
ranks say their node, its ``nodes`` and ``job`` say the rest. The nodes' clocks are one machine's
or NTP's: incidents are put in one order by each node's wall-clock start.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from loaderdoctor.forensics.incident import HEALING_ACTIONS, Incident
from loaderdoctor.inputfile import InputFileError, load_json
from loaderdoctor.runner import protocol
from loaderdoctor.runner.model import (
    Delivered,
    EndedBy,
    JobSummary,
    NodeInfo,
    NodeSummary,
    ProcessSummary,
    RunReport,
    RunStatus,
)
from loaderdoctor.runner.protocol import INCIDENTS_DIRNAME, REPORT_NAME

EARLIER_DIRNAME = "earlier"
# The worst first: one crashed node makes the job crashed, one that lost samples makes it lossy.
STATUS_ORDER: tuple[RunStatus, ...] = ("crashed", "healed-with-loss", "healed", "ok")


class JobReportError(ValueError):
    """The folder cannot be read as one job: one line for the user."""


def load_run_or_job(path: Path) -> tuple[RunReport, bool]:
    """The report at ``path`` and whether it is a job's: a run folder (or its report.json) as
    ``load_report`` reads it, or a job folder's node reports merged afresh."""
    from loaderdoctor.runner.core import load_report

    top = path / REPORT_NAME
    if path.is_dir() and not top.exists() and not node_folders(path):
        raise JobReportError(
            f"no report in {path}: neither {REPORT_NAME} nor node folders with one (a "
            "multi-node run writes one folder per node)"
        )
    if not path.is_dir() or not node_folders(path):
        return load_report(path), False
    try:
        data = load_json(top) if top.is_file() else None
    except (OSError, ValueError):
        data = None  # a job report cut off while written: the node reports make it again
    if data is not None and not is_job_report(data):
        return load_report(path), False  # a single run's folder, whatever else is in it
    return merge_job(path), True


def node_folders(directory: Path) -> list[Path]:
    """The folders under ``directory`` that a node's run wrote (or is writing) into."""
    if not directory.is_dir():
        return []
    return sorted(
        folder
        for folder in directory.iterdir()
        if folder.is_dir()
        and folder.name != EARLIER_DIRNAME
        and not folder.name.startswith(".")
        and ((folder / REPORT_NAME).exists() or (folder / INCIDENTS_DIRNAME).is_dir())
    )


def is_job_report(data: object) -> bool:
    return isinstance(data, dict) and data.get("job") is not None


def read_node_report(folder: Path) -> RunReport:
    path = folder / REPORT_NAME
    try:
        data = load_json(path)
    except FileNotFoundError:
        raise JobReportError(
            f"{folder} has no {REPORT_NAME}: its node's run is starting, or was killed before "
            "it wrote one; wait for it, or remove the folder"
        ) from None
    except InputFileError as error:  # not a file, or nested past the parser: not ours
        raise JobReportError(f"cannot read {path}: {error}") from None
    except ValueError as error:
        raise JobReportError(
            f"{path} is half-written ({error}): its node's run was cut off "
            "while writing it; rerun that node, or remove the folder"
        ) from None
    except OSError as error:
        raise JobReportError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        report = RunReport.from_dict(data)
    except (TypeError, ValueError, KeyError) as error:
        raise JobReportError(f"{path} is not a loaderdoctor run report: {error}") from None
    if report.node is None:
        raise JobReportError(
            f"{path} is not a node's report (a single-machine run's): a job's folder holds only "
            "the node folders that loaderdoctor run -- torchrun --nnodes N ... writes"
        )
    return report


def merge_job(directory: Path) -> RunReport:
    """The job report of the node folders under ``directory``; ``JobReportError`` where they are
    not one job's (none, one half-written, nodes of two jobs)."""
    folders = node_folders(directory)
    if not folders:
        raise JobReportError(
            f"no report in {directory}: neither {REPORT_NAME} nor node folders with one"
        )
    nodes = [(folder, read_node_report(folder)) for folder in folders]
    _check_one_job(nodes)
    nodes.sort(key=lambda pair: _node_order(_node(pair[1])))
    start = min(_node(report).started_wall for _, report in nodes)
    incidents = sorted(
        (
            _job_incident(incident, report, start)
            for _, report in nodes
            for incident in report.incidents
        ),
        key=lambda i: i.time_s if i.time_s is not None else 0.0,
    )
    ranks: list[ProcessSummary] = _with_node(nodes, "ranks")
    quarantine: list[Any] = []
    for _, report in nodes:
        quarantine.extend(q for q in report.quarantine if q not in quarantine)
    quarantine.sort(key=protocol.numeric_order)
    summaries = [_node_summary(folder, report, directory) for folder, report in nodes]
    statuses = {summary.status for summary in summaries}
    status: RunStatus = next((s for s in STATUS_ORDER if s in statuses), "ok")
    ended_by = ended_by_of(nodes, incidents) if status == "crashed" else None
    ender = next((r for _, r in nodes if ended_by and _node(r).name == ended_by.node), None)
    ends = [_node(r).started_wall + r.duration_s for _, r in nodes]
    return RunReport(
        status=status,
        command=nodes[0][1].command,
        exit_code=ended_by.exit_code if ended_by is not None else 0,
        duration_s=round(max(ends) - start, 3),
        incidents=incidents,
        quarantine=quarantine,
        delivered=Delivered(
            sum(r.delivered.batches for _, r in nodes), sum(r.delivered.samples for _, r in nodes)
        ),
        ranks=ranks,
        signal=ender.signal if ender is not None else None,
        interrupted=any(r.interrupted for _, r in nodes),
        started_at=datetime.datetime.fromtimestamp(start).isoformat(timespec="seconds"),
        report_dir=str(directory),
        notes=[f"{_node(r).name}: {note}" for _, r in nodes for note in _node_notes(r)],
        supervisor="died" if any(r.supervisor == "died" for _, r in nodes) else "finished",
        unsupervised_loaders=[u for _, r in nodes for u in r.unsupervised_loaders],
        process_deaths=_with_node(nodes, "process_deaths"),
        data_findings=_each_once(f for _, r in nodes for f in r.data_findings),
        oom_protection=protocol.weakest_protection(
            [(_node(r).name, r.oom_protection) for _, r in nodes if r.oom_protection is not None]
        ),
        job=JobSummary(id=_node(nodes[0][1]).job_id, nodes=len(nodes), ended_by=ended_by),
        nodes=summaries,
    )


def _node(report: RunReport) -> NodeInfo:
    assert report.node is not None  # read_node_report refuses a report without one
    return report.node


def _with_node(nodes: list[tuple[Path, RunReport]], entries: str) -> list[Any]:
    """Each node report's ``entries`` (its ranks, its deaths), each with its node's name: a pid
    is a node's own."""
    return [
        dataclasses.replace(entry, node=_node(report).name)
        for _, report in nodes
        for entry in getattr(report, entries)
    ]


def _node_order(node: NodeInfo) -> tuple[bool, int, str]:
    return (node.rank is None, node.rank if node.rank is not None else 0, node.name)


def _node_notes(report: RunReport) -> list[str]:
    """A node's notes, less the one that points at the job report (this is it)."""
    return [note for note in report.notes if "is one node of a multi-node job" not in note]


def _check_one_job(nodes: list[tuple[Path, RunReport]]) -> None:
    jobs: dict[str | None, list[str]] = {}
    for folder, report in nodes:
        jobs.setdefault(_node(report).job_id, []).append(folder.name)
    if len(jobs) > 1:
        said = "; ".join(
            f"{', '.join(names)}: job {job_id or 'not said'}" for job_id, names in jobs.items()
        )
        raise JobReportError(
            f"the node folders are of different jobs ({said}): give each job its own --report-dir"
        )


def _job_incident(incident: Incident, report: RunReport, start: float) -> Incident:
    """The incident with its node, its time counted from the job's first node's start."""
    offset = _node(report).started_wall - start
    time_s = round(incident.time_s + offset, 3) if incident.time_s is not None else None
    return dataclasses.replace(incident, node=_node(report).name, time_s=time_s)


def _node_summary(folder: Path, report: RunReport, directory: Path) -> NodeSummary:
    node = _node(report)
    return NodeSummary(
        name=node.name,
        host=node.host,
        rank=node.rank,
        status=report.status,
        exit_code=report.exit_code,
        signal=report.signal,
        duration_s=report.duration_s,
        ranks=[rank.rank for rank in report.ranks],
        incidents=len(report.incidents),
        delivered=report.delivered,
        report=(folder / REPORT_NAME).relative_to(directory).as_posix(),
        supervisor=report.supervisor,
    )


def ended_by_of(nodes: list[tuple[Path, RunReport]], incidents: list[Incident]) -> EndedBy:
    """Who ended a crashed job: the first incident that raised, in job time; else the node whose
    command failed first (its own error, or a rank lost to a peer that died unsupervised)."""
    by_name = {_node(report).name: report for _, report in nodes}
    raised = next((i for i in incidents if i.action not in HEALING_ACTIONS and i.node), None)
    if raised is not None and raised.node is not None:
        report = by_name[raised.node]
        return EndedBy(raised.node, _node(report).rank, raised.rank, raised.cause, report.exit_code)
    failed = [r for _, r in nodes if r.status == "crashed"]
    report = min(failed, key=lambda r: _node(r).started_wall + r.duration_s)
    ranks = [rank.rank for rank in report.ranks]
    rank = ranks[0] if len(ranks) == 1 else None
    return EndedBy(_node(report).name, _node(report).rank, rank, None, report.exit_code)


def _each_once(findings: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Silent data findings, each once: the nodes of a job run the same code."""
    kept: list[dict[str, Any]] = []
    for finding in findings:
        if finding not in kept:
            kept.append(finding)
    return kept
