"""The terminal summary of a ``loaderdoctor run`` (rich), printed to stderr after the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from loaderdoctor.forensics.catalog import page_command
from loaderdoctor.forensics.incident import HEALING_ACTIONS, Incident
from loaderdoctor.forensics.verdict_text import crashing_thread_first
from loaderdoctor.report.console import render_plain, terminal, width_for
from loaderdoctor.runner.model import ProcessDeath, RunReport
from loaderdoctor.units import format_bytes, format_seconds, shortened

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

STATUS_STYLES = {
    "ok": "bold green",
    "healed": "bold yellow",
    "healed-with-loss": "bold dark_orange",
    "crashed": "bold red",
}
MAX_DETAILED_INCIDENTS = 3
SUMMARY_STACK_LINES = 12


def format_headline(report: RunReport) -> str:
    """``"the command failed: exit code 139 (SIGSEGV) after 4.2 s"``: what became of the user's
    command, never worded as if loaderdoctor itself had crashed; Ctrl-C is not a failure."""
    if report.supervisor == "running":
        return f"the command is still running (for {format_seconds(report.duration_s)} so far)"
    if not report.exit_known:
        return (
            "loaderdoctor run did not finish, and nothing saw the command end: its exit status "
            f"is unknown (it ran at least {format_seconds(report.duration_s)})"
        )
    interrupted = report.interrupted or report.signal == "SIGINT"
    ended = f"exit code {report.exit_code}"
    if report.signal and report.signal != "SIGINT":  # 130 after an interruption says SIGINT
        ended += f" ({report.signal})"
    after = f"{ended} after {format_seconds(report.duration_s)}"
    if interrupted:
        return f"the command was interrupted: {after}"
    if report.exit_code != 0:
        return f"the command failed: {after}"
    if report.status == "crashed" and not any(
        i.action not in HEALING_ACTIONS for i in report.incidents
    ):  # every incident healed, and yet not one sample delivered
        return f"the command succeeded but its DataLoaders delivered no sample: {after}"
    if report.status == "crashed":  # it went on after a DataLoader raised
        return f"the command succeeded but a DataLoader raised: {after}"
    if report.status == "healed":
        return f"the command succeeded, healed: {after}"
    return f"the command succeeded: {after}"


def format_job_headline(report: RunReport) -> str:
    """A job report's headline: which node (and rank) ended it, or that every node finished."""
    assert report.job is not None
    count = f"{report.job.nodes} node{'s' if report.job.nodes != 1 else ''}"
    after = f"after {format_seconds(report.duration_s)}"
    ended = report.job.ended_by
    if ended is not None:
        rank = f", rank {ended.rank}" if ended.rank is not None else ""
        return (
            f"the job failed on {ended.node}{rank}: exit code {ended.exit_code} {after} ({count})"
        )
    if report.status == "healed-with-loss":
        return f"the job succeeded on {count}, healed with healthy samples lost: {after}"
    if report.status == "healed":
        return f"the job succeeded on {count}, healed: {after}"
    return f"the job succeeded on {count}: {after}"


def format_verdict(report: RunReport) -> str:
    """The summary's last line, what a log's reader looks for first: the incident that ended the
    run (its cause, title and where), what was healed, or that no worker died. It says what
    report.json's status says: never "healed" for a run whose status is not."""
    raised = [i for i in report.incidents if i.action not in HEALING_ACTIONS]
    if raised:
        first = raised[0]
        where = format_where(first)
        more = f" (+{len(raised) - 1} more)" if len(raised) > 1 else ""
        place = f" ({where})" if where != "-" else ""
        loader = f" in {first.loader}" if first.loader and several_loaders(report) else ""
        return f"verdict: {first.cause}: {first.title}{place}{loader}{more}"
    if not report.exit_known:  # what is known so far, and no more
        healed = f"{len(report.incidents)} incident(s) healed" if report.incidents else None
        recorded = f"{healed or 'no worker death'} recorded"
        if report.supervisor == "running":
            return f"verdict: not yet: the run goes on; {recorded} so far"
        return f"verdict: unknown: the run's end was not seen; {recorded}"
    if report.incidents:
        causes = ", ".join(sorted({i.cause for i in report.incidents}))
        count = f"{len(report.incidents)} incident(s)"
        if report.status == "crashed" and report.delivered.samples == 0 and report.exit_code == 0:
            return f"verdict: {count} ({causes}), and not one sample delivered: nothing was healed"
        if report.status == "crashed":
            return f"verdict: the command failed after {count} ({causes}) were healed"
        if report.status == "healed-with-loss":
            return f"verdict: {count} healed, with healthy samples lost ({causes})"
        return f"verdict: {count} healed ({causes})"
    if report.process_deaths:
        return _unsupervised_death(report)
    # A loader that ran unsupervised may have lost a worker that nothing of ours saw (torch's own
    # "DataLoader worker ... exited unexpectedly", above the summary): only the supervised ones
    # are vouched for, and the failure is not called the command's own.
    unsupervised = sum(u.count for u in report.unsupervised_loaders)
    if report.unreached:
        died = "no supervised DataLoader worker died (DataLoaders in Ray workers were not reached"
        if report.exit_code != 0 and not (report.interrupted or report.signal == "SIGINT"):
            return f"verdict: {died}: a worker death there is torch's own error, above); the command failed"
        return f"verdict: {died})"
    if unsupervised:
        died = f"no supervised DataLoader worker died ({unsupervised} ran unsupervised"
        if report.exit_code != 0 and not (report.interrupted or report.signal == "SIGINT"):
            return (
                f"verdict: {died}: a worker death there is torch's own error, above); "
                "the command failed"
            )
        return f"verdict: {died})"
    if report.exit_code != 0 and not (report.interrupted or report.signal == "SIGINT"):
        grew = _trainer_growth(report)
        if grew is not None:
            return f"verdict: no DataLoader worker died; {grew}"
        ended = report.job.ended_by if report.job is not None else None
        if ended is not None:
            return f"verdict: no DataLoader worker died; {ended.node}'s command failed on its own"
        return "verdict: no DataLoader worker died; the command failed on its own"
    return "verdict: no DataLoader worker died"


def _unsupervised_death(report: RunReport) -> str:
    """The first death in the tree that no supervised DataLoader saw, uncollected."""
    death, others = report.process_deaths[0], len(report.process_deaths) - 1
    more = f" (+{others} more)" if others else ""
    return (
        f"verdict: no DataLoader worker died, but a process the command started did: pid "
        f"{death.pid} ({death.name}) {death.ended}, never collected by its parent (pid "
        f"{death.parent_pid}){more}"
    )


def _trainer_growth(report: RunReport) -> str | None:
    """The training process's own growth, when the memory timeline found it."""
    findings = report.memory.findings if report.memory is not None else []
    for finding in findings:
        if finding.id == "trainer-memory-growth" and finding.evidence:
            return f"the training process's own memory grew ({finding.evidence[0]})"
    return None


def format_delivered(report: RunReport) -> str:
    text = f"{report.delivered.batches} batches, {report.delivered.samples} samples delivered"
    loaders = sum(r.loaders for r in report.ranks)
    ranked = [r for r in report.ranks if r.rank is not None]
    if ranked:
        text += f" by {len(ranked)} ranks"
    if report.nodes:
        text += f" on {len(report.nodes)} nodes"
    if loaders:
        text += f" ({loaders} supervised DataLoader{'s' if loaders != 1 else ''})"
    return text


def format_where(incident: Incident) -> str:
    parts = [incident.node] if incident.node is not None else []
    if incident.rank is not None:
        parts.append(f"rank {incident.rank}")
    if incident.worker_id is not None:
        parts.append(f"worker {incident.worker_id}")
    if incident.indices:
        shown = ", ".join(repr(i) for i in incident.indices[:6])
        more = f", … ({len(incident.indices)})" if len(incident.indices) > 6 else ""
        parts.append(f"sample {shown}{more}")
    elif incident.position is not None:  # a stream's culprit: its place in its worker's stream
        parts.append(f"item #{incident.position}")
    if incident.key is not None:
        parts.append(f"key {incident.key!r}")
    if incident.batch is not None:
        parts.append(f"batch {incident.batch}")
    return ", ".join(parts) or "-"


def format_memory(report: RunReport) -> list[str]:
    memory = report.memory
    if memory is None:
        return []
    workers = [p for p in memory.processes if p.role == "worker"]
    lines = []
    if workers:
        peak = max(workers, key=lambda p: p.peak_uss_bytes or p.peak_rss_bytes)
        kind = "USS" if peak.peak_uss_bytes is not None else "RSS"
        value = peak.peak_uss_bytes if peak.peak_uss_bytes is not None else peak.peak_rss_bytes
        # The loaders' own count: memory is sampled, and a short-lived worker can be missed.
        ran = sum(r.workers for r in report.ranks) or len(workers)
        lines.append(
            f"{ran} worker process{'es' if ran != 1 else ''}; "
            f"highest peak {kind} {format_bytes(value)} (pid {peak.pid})"
        )
    if memory.shm_peak_used_bytes is not None:
        lines.append(
            f"/dev/shm peak {format_bytes(memory.shm_peak_used_bytes)} used of "
            f"{format_bytes(memory.shm_total_bytes)}"
        )
    return lines


def format_data_finding(finding: dict[str, Any]) -> str:
    """One silent data bug: its title, first evidence line and fix."""
    evidence = finding.get("evidence") or [""]
    return (
        f"wrong data [{finding.get('kind')}]: {finding.get('title')}; {evidence[0]}; "
        f"fix: {finding.get('fix')}"
    )


def _incident_table(report: RunReport) -> RenderableType:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=None, expand=False, show_edge=False, pad_edge=False)
    for column in ("t (s)", "cause", "where", "action"):
        table.add_column(column, overflow="fold")
    for incident in report.incidents:
        table.add_row(
            "-" if incident.time_s is None else f"{incident.time_s:.1f}",
            Text(incident.cause, style="bold"),
            Text(format_where(incident)),
            Text(incident.action),
        )
    return table


def _node_table(report: RunReport) -> RenderableType:
    """A job's nodes, in node order: each one's status, exit code and ranks."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=None, expand=False, show_edge=False, pad_edge=False)
    for column in ("node", "host", "status", "exit", "ranks", "samples", "incidents"):
        table.add_column(column, overflow="fold")
    for node in report.nodes:
        table.add_row(  # Text, not str: a host name is not rich markup
            Text(node.name),
            Text(node.host),
            Text(node.status, style=STATUS_STYLES.get(node.status, "")),
            str(node.exit_code),
            ", ".join("-" if rank is None else str(rank) for rank in node.ranks) or "-",
            str(node.delivered.samples),
            str(node.incidents),
        )
    return table


def several_loaders(report: RunReport) -> bool:
    """The incidents came from more than one loader (train and val): each is then named."""
    return len({i.loader for i in report.incidents if i.loader}) > 1


def _incident_details(incident: Incident, name_loader: bool = False) -> list[RenderableType]:
    from rich.text import Text

    parts: list[RenderableType] = [Text(f"  {incident.cause}: {incident.title}", style="bold")]
    if name_loader and incident.loader:
        parts.append(Text(f"    - loader: {incident.loader}"))
    parts.extend(Text(f"    - {line}") for line in incident.evidence[:3])
    # Above the fix, which may say "read the stack above": the crashing (or stuck) thread's
    # frames, innermost last, as many as a terminal screen holds; report.json keeps them all.
    stack = incident.diagnosis.python_stack
    if stack:
        parts.append(Text("    Python stack of the worker:"))
        parts.extend(Text(f"      {line}", style="dim") for line in summary_stack(stack))
    if incident.fixes:
        parts.append(Text(f"    fix: {incident.fixes[0]}", style="green"))
    if incident.docs:
        parts.append(Text(f"    more: {page_command(incident.cause)}", style="dim"))
    return parts


def summary_stack(dump: str) -> list[str]:
    """The first thread of ``crashing_thread_first(dump)`` (the crashing or stuck one, with
    faulthandler's header), cut to ``SUMMARY_STACK_LINES``; the rest is in report.json."""
    blocks = crashing_thread_first(dump).split("\n\n")
    first = [block for block in blocks if not block.startswith("Fatal Python error")][:1]
    header = [block for block in blocks if block.startswith("Fatal Python error")][:1]
    lines = "\n\n".join([*header, *first]).splitlines()
    if len(lines) > SUMMARY_STACK_LINES:
        hidden = len(lines) - SUMMARY_STACK_LINES
        lines = [*lines[:SUMMARY_STACK_LINES], f"... ({hidden} more lines in report.json)"]
    return lines


def format_process_death(death: ProcessDeath) -> str:
    """``pid 4242 (python), started by pid 4200 (python train.py): killed by SIGSEGV at 1.5 s,
    still uncollected 28 s later``."""
    parent = f"pid {death.parent_pid}"
    if death.parent_command:
        parent += f" ({shortened(death.parent_command, 60)})"
    where = f"{death.node}: " if death.node else ""
    return (
        f"{where}pid {death.pid} ({death.name}), started by {parent}: {death.ended} at "
        f"{format_seconds(death.seen_s)}, still uncollected {format_seconds(death.uncollected_s)} "
        "later"
    )


def _death_lines(report: RunReport) -> list[RenderableType]:
    from rich.text import Text

    if not report.process_deaths:
        return []
    parts: list[RenderableType] = [
        Text(
            "  process(es) of the command that died outside any supervised DataLoader, and that "
            "their parent never collected (a pool that waits for one waits for ever):",
            style="bold yellow",
        )
    ]
    for death in report.process_deaths[:MAX_DETAILED_INCIDENTS]:
        parts.append(Text(f"    - {format_process_death(death)}"))
        parts.extend(Text(f"      kernel: {line}", style="dim") for line in death.kernel_log[-1:])
    if len(report.process_deaths) > MAX_DETAILED_INCIDENTS:
        parts.append(Text(f"    (+{len(report.process_deaths) - MAX_DETAILED_INCIDENTS} more)"))
    return parts


def _memory_lines(report: RunReport) -> list[RenderableType]:
    from rich.text import Text

    parts: list[RenderableType] = [Text(f"  memory: {line}") for line in format_memory(report)]
    if report.memory is not None:
        for finding in report.memory.findings:
            parts.append(Text(f"  {finding.id}: {finding.title}", style="bold yellow"))
            parts.extend(Text(f"    - {line}") for line in finding.evidence[:4])
            if finding.fixes:
                parts.append(Text(f"    fix: {finding.fixes[0]}", style="green"))
    return parts


def build_summary(report: RunReport, html: Path | None = None) -> RenderableType:
    """Headline, counts, incidents (the first few in detail), memory, notes, where the files are."""
    from rich.console import Group
    from rich.text import Text

    headline = Text(f"loaderdoctor {'job' if report.job else 'run'}: ", style="bold")
    said = format_job_headline(report) if report.job else format_headline(report)
    headline.append(said, style=STATUS_STYLES.get(report.status, ""))
    parts: list[RenderableType] = [headline, Text(f"  {format_delivered(report)}")]
    if report.nodes:
        parts.append(_node_table(report))
    if report.incidents:
        parts.append(Text(f"  {len(report.incidents)} incident(s):"))
        parts.append(_incident_table(report))
        # The incidents that ended the run first: the one the last line names is explained.
        detailed = sorted(report.incidents, key=lambda i: i.action in HEALING_ACTIONS)
        for incident in detailed[:MAX_DETAILED_INCIDENTS]:
            parts.extend(_incident_details(incident, several_loaders(report)))
    if report.quarantine:
        shown = ", ".join(repr(i) for i in report.quarantine[:20])
        parts.append(Text(f"  quarantined samples: {shown}"))
    parts.extend(_death_lines(report))
    parts.extend(_memory_lines(report))
    if report.oom_protection is not None:
        parts.append(Text(f"  OOM protection: {report.oom_protection}"))
    parts.extend(
        Text(f"  {format_data_finding(finding)}", style="yellow")
        for finding in report.data_findings
    )
    parts.extend(Text(f"  note: {note}", style="dim") for note in report.notes)
    written = (
        [] if "report.json" in report.unwritten else [str(Path(report.report_dir) / "report.json")]
    )
    if html is not None:
        written.append(str(html))
    if written:
        parts.append(Text(f"  report: {', '.join(written)}", style="dim"))
    parts.append(Text(format_verdict(report), style=STATUS_STYLES.get(report.status, "")))
    return Group(*parts)


def print_text(report: RunReport, file: IO[str] | None = None, *, html: Path | None = None) -> None:
    """The summary on ``file`` (stdout by default; ``run`` passes stderr, so that the command's
    stdout stays byte-identical under it)."""
    with terminal(file, width=width_for(file)) as console:
        console.print(build_summary(report, html))


def format_text(report: RunReport, width: int = 100, *, html: Path | None = None) -> str:
    """The summary as plain text (no colour), for tests and logs."""

    def printer(report: RunReport, console: Console) -> None:
        console.print(build_summary(report, html))

    return render_plain(printer, report, width, strip=False)


def format_json(report: RunReport) -> str:
    return json.dumps(report.to_dict(), indent=2, default=repr) + "\n"
