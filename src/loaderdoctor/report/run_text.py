"""The terminal summary of a ``loaderdoctor run`` (rich), printed to stderr after the command."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from loaderdoctor.envchecks import human_bytes
from loaderdoctor.runner.model import RunIncident, RunReport

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

STATUS_STYLES = {"ok": "bold green", "healed": "bold yellow", "crashed": "bold red"}
MAX_DETAILED_INCIDENTS = 3


def format_headline(report: RunReport) -> str:
    """``"crashed: exit code 139 (SIGSEGV) after 4.2 s"``."""
    ended = f"exit code {report.exit_code}"
    if report.signal:
        ended += f" ({report.signal})"
    if report.interrupted:
        ended += ", interrupted"
    return f"{report.status}: {ended} after {report.duration_s:.1f} s"


def format_delivered(report: RunReport) -> str:
    text = f"{report.delivered.batches} batches, {report.delivered.samples} samples delivered"
    loaders = sum(r.loaders for r in report.ranks)
    ranked = [r for r in report.ranks if r.rank is not None]
    if ranked:
        text += f" by {len(ranked)} ranks"
    if loaders:
        text += f" ({loaders} supervised DataLoader{'s' if loaders != 1 else ''})"
    return text


def format_where(incident: RunIncident) -> str:
    parts = []
    if incident.rank is not None:
        parts.append(f"rank {incident.rank}")
    if incident.worker_id is not None:
        parts.append(f"worker {incident.worker_id}")
    if incident.indices:
        shown = ", ".join(repr(i) for i in incident.indices[:6])
        more = f", … ({len(incident.indices)})" if len(incident.indices) > 6 else ""
        parts.append(f"sample {shown}{more}")
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
            f"highest peak {kind} {human_bytes(value)} (pid {peak.pid})"
        )
    if memory.shm_peak_used_bytes is not None:
        lines.append(
            f"/dev/shm peak {human_bytes(memory.shm_peak_used_bytes)} used of "
            f"{human_bytes(memory.shm_total_bytes)}"
        )
    return lines


def build_summary(report: RunReport, html: Path | None = None) -> RenderableType:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[RenderableType] = []
    headline = Text("loaderdoctor run ", style="bold")
    headline.append(format_headline(report), style=STATUS_STYLES.get(report.status, ""))
    parts.append(headline)
    parts.append(Text(f"  {format_delivered(report)}"))
    if report.incidents:
        table = Table(title=None, expand=False, show_edge=False, pad_edge=False)
        for column in ("t (s)", "cause", "where", "action"):
            table.add_column(column, overflow="fold")
        for incident in report.incidents:
            table.add_row(
                "-" if incident.time_s is None else f"{incident.time_s:.1f}",
                Text(incident.cause, style="bold"),
                format_where(incident),
                incident.action,
            )
        parts.append(Text(f"  {len(report.incidents)} incident(s):"))
        parts.append(table)
        for incident in report.incidents[:MAX_DETAILED_INCIDENTS]:
            parts.append(Text(f"  {incident.cause}: {incident.title}", style="bold"))
            for line in incident.evidence[:3]:
                parts.append(Text(f"    - {line}"))
            if incident.fixes:
                parts.append(Text(f"    fix: {incident.fixes[0]}", style="green"))
            if incident.docs:
                parts.append(Text(f"    more: {incident.docs}", style="dim"))
    if report.quarantine:
        shown = ", ".join(repr(i) for i in report.quarantine[:20])
        parts.append(Text(f"  quarantined samples: {shown}"))
    for line in format_memory(report):
        parts.append(Text(f"  memory: {line}"))
    if report.memory is not None:
        for finding in report.memory.findings:
            parts.append(Text(f"  {finding.id}: {finding.title}", style="bold yellow"))
            for line in finding.evidence[:4]:
                parts.append(Text(f"    - {line}"))
            parts.append(Text(f"    fix: {finding.fixes[0]}", style="green"))
    for note in report.notes:
        parts.append(Text(f"  note: {note}", style="dim"))
    written = [str(Path(report.report_dir) / "report.json")]
    if html is not None:
        written.append(str(html))
    parts.append(Text(f"  report: {', '.join(written)}", style="dim"))
    return Group(*parts)


def print_run_summary(
    report: RunReport, html: Path | None = None, console: Console | None = None
) -> None:
    """To stderr by default: the command's stdout must stay byte-identical under ``run``."""
    from rich.console import Console

    (console or Console(stderr=True)).print(build_summary(report, html))


def format_run_text(report: RunReport, html: Path | None = None, width: int = 100) -> str:
    """The summary as plain text (no colour), for tests and logs."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, highlight=False)
    console.print(build_summary(report, html))
    return buffer.getvalue()
