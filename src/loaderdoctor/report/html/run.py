"""``report.html``: one self-contained page (inline CSS and SVG, no network) for a run report."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from loaderdoctor.forensics.catalog import page_command
from loaderdoctor.forensics.incident import Incident
from loaderdoctor.report.html.chart import Chart, Line, svg_chart
from loaderdoctor.report.html.job import job_meta, nodes_section
from loaderdoctor.report.html.page import (
    PALETTE,
    STATUS_COLORS,
    docs_href,
    legend,
    page,
    with_code,
    write_page,
)
from loaderdoctor.report.html.page import escape as _e
from loaderdoctor.runner.model import (
    MemoryFinding,
    MemoryReport,
    ProcessMemory,
    RunReport,
)
from loaderdoctor.units import MiB, format_bytes, format_seconds

HTML_NAME = "report.html"
DIED = ' class="died"'  # a process-table row of a worker that an incident names


def _process_label(process: ProcessMemory) -> str:
    rank = f"rank {process.rank} " if process.rank is not None else ""
    if process.role == "main":
        return f"{rank}main pid {process.pid} (RSS)"
    return f"{rank}worker pid {process.pid}"


def memory_lines(memory: MemoryReport, deaths: dict[int, str] | None = None) -> list[Line]:
    """Each worker's private memory (USS, else PSS, else RSS); main processes dashed (RSS). A
    worker in ``deaths`` (``_deaths``) ends in a mark that says how it died."""
    deaths = deaths or {}
    lines = []
    for number, process in enumerate(memory.processes):
        column = 1
        if process.role == "worker":
            for candidate in (2, 3):
                if any(row[candidate] is not None for row in process.series):
                    column = candidate
                    break
        points = [(row[0], float(row[column] or 0)) for row in process.series]
        metric = {1: "RSS", 2: "USS", 3: "PSS"}[column]
        label = _process_label(process)
        if process.role == "worker":
            label += f" ({metric})"
        died = deaths.get(process.pid) if process.role == "worker" and points else None
        lines.append(
            Line(
                label,
                points,
                PALETTE[number % len(PALETTE)],
                dashed=process.role == "main",
                end_mark=f"died: {died}" if died else "",
            )
        )
    return lines


def incident_markers(incidents: Sequence[Incident]) -> list[tuple[float, str]]:
    markers = []
    for incident in incidents:
        if incident.time_s is not None:
            where = f" #{incident.indices[0]}" if incident.indices else ""
            markers.append((incident.time_s, f"{incident.cause}{where}"))
    return markers


def _incident_card(incident: Incident, page_dir: str | Path | None) -> str:
    where = [f"<b>{_e(incident.node)}</b>"] if incident.node is not None else []
    if incident.rank is not None:
        where.append(f"rank {incident.rank}")
    if incident.worker_id is not None:
        where.append(
            f"worker {incident.worker_id}" + (f" (pid {incident.pid})" if incident.pid else "")
        )
    if incident.indices:
        where.append("sample " + ", ".join(_e(repr(i)) for i in incident.indices[:20]))
    elif incident.position is not None:  # a stream's culprit: its place in its worker's stream
        where.append(f"item #{incident.position}")
    if incident.key is not None:
        where.append(f"key <code>{_e(repr(incident.key))}</code>")
    if incident.sample_file:
        where.append(f"file <code>{_e(incident.sample_file)}</code>")
    if incident.shard:
        where.append(f"shard <code>{_e(incident.shard)}</code>")
    if incident.batch is not None:
        where.append(f"batch {incident.batch}")
    if incident.epoch is not None:
        where.append(f"epoch {incident.epoch}")
    if incident.signal:
        where.append(_e(incident.signal))
    if incident.time_s is not None:
        where.append(f"at {format_seconds(incident.time_s)}")
    parts = [
        '<div class="card incident">',
        f'<h3><span class="cause">{_e(incident.cause)}</span> — {_e(incident.title)}'
        f' <span class="muted">({_e(incident.action)})</span></h3>',
        f'<p class="where">{" · ".join(where)}</p>',
    ]
    if incident.evidence:
        parts.append("<b>Evidence</b><ul>")
        parts.extend(f"<li>{_e(line)}</li>" for line in incident.evidence)
        parts.append("</ul>")
    stack = incident.diagnosis.python_stack
    if stack:  # open, above the fixes: they say "read the stack above"
        parts.append(
            "<details open><summary>Python stack of the worker</summary>"
            f"<pre>{_e(stack)}</pre></details>"
        )
    if incident.fixes:
        parts.append('<b>Fix</b><ul class="fixes">')
        parts.extend(f"<li>{with_code(line)}</li>" for line in incident.fixes)
        parts.append("</ul>")
    if incident.docs:
        href = docs_href(incident.docs, page_dir)
        parts.append(
            f'<p class="muted">More: <a href="{_e(href)}">{_e(incident.docs)}</a></p>'
            if href  # a docs URL or a checkout: its page; elsewhere the command that prints it
            else f'<p class="muted">More: <code>{_e(page_command(incident.cause))}</code></p>'
        )
    parts.append("</div>")
    return "".join(parts)


def _finding_card(finding: MemoryFinding) -> str:
    more = (
        f'<p class="muted">More: <a href="{_e(finding.docs)}">{_e(finding.docs)}</a></p>'
        if finding.docs
        else ""
    )
    return (
        f'<div class="card finding"><h3><span class="cause">{_e(finding.id)}</span> — '
        f"{_e(finding.title)}</h3><p>{with_code(finding.explanation)}</p><b>Evidence</b><ul>"
        + "".join(f"<li>{_e(line)}</li>" for line in finding.evidence)
        + '</ul><b>Fix</b><ul class="fixes">'
        + "".join(f"<li>{with_code(line)}</li>" for line in finding.fixes)
        + f"</ul>{more}</div>"
    )


def _plot(title: str, chart: Chart, with_legend: bool = True) -> str:
    key = legend(chart.lines) if with_legend else ""
    return f'<div class="plot"><h3>{_e(title)}</h3>{svg_chart(chart)}{key}</div>'


def _memory_plots(report: RunReport, memory: MemoryReport) -> list[str]:
    markers = incident_markers(report.incidents)
    x_max = max(
        [report.duration_s, *(t for t, _ in memory.shm_series)]
        + [row[0] for p in memory.processes for row in p.series]
    )
    lines = memory_lines(memory, _deaths(report.incidents))
    workers = [line for line in lines if not line.dashed]
    mains = [line for line in lines if line.dashed]
    parts = []
    for title, group in (
        ("DataLoader workers: private memory (USS) of each", workers),
        ("Processes that own the DataLoaders: RSS", mains),
    ):
        if group:
            chart = Chart(group, x_max, MiB, "MiB", x_suffix=" s", markers=markers)
            parts.append(_plot(title, chart))
    if not lines:
        parts.append('<p class="muted">No process was sampled.</p>')
    if memory.shm_series:
        shm = [Line("/dev/shm used", [(t, float(v)) for t, v in memory.shm_series], "#6a3d9a")]
        total = f" of {format_bytes(memory.shm_total_bytes)}" if memory.shm_total_bytes else ""
        title = f"/dev/shm used (peak {format_bytes(memory.shm_peak_used_bytes)}{total})"
        chart = Chart(shm, x_max, MiB, "MiB", x_suffix=" s", markers=markers)
        parts.append(_plot(title, chart, with_legend=False))
    return parts


def _optional_bytes(count: int | None) -> str:
    return format_bytes(count) if count is not None else "-"


def _deaths(incidents: Sequence[Incident]) -> dict[int, str]:
    """The pid of each worker an incident names, and what became of it (``native-crash,
    SIGSEGV``)."""
    deaths: dict[int, str] = {}
    for incident in incidents:
        if incident.pid is not None and incident.pid not in deaths:
            deaths[incident.pid] = ", ".join(filter(None, [incident.cause, incident.signal]))
    return deaths


def _process_table(memory: MemoryReport, incidents: Sequence[Incident] = ()) -> str:
    deaths = _deaths(incidents)

    def role(process: ProcessMemory) -> str:
        if process.pid not in deaths:
            return _e(process.role)
        return f'{_e(process.role)} <span class="died-tag">died: {_e(deaths[process.pid])}</span>'

    rows = "".join(
        f"<tr{DIED if p.pid in deaths else ''}><td>{p.pid}</td><td>{role(p)}</td>"
        f"<td>{'' if p.rank is None else p.rank}</td>"
        f"<td>{_e(p.start_method or '')}</td><td>{format_bytes(p.peak_rss_bytes)}</td>"
        f"<td>{_optional_bytes(p.peak_uss_bytes)}</td><td>{_optional_bytes(p.peak_pss_bytes)}</td>"
        f"<td>{p.first_seen_s:.1f}–{format_seconds(p.last_seen_s)}</td></tr>"
        for p in memory.processes
    )
    if not rows:
        return ""
    return (
        "<table><tr><th>pid</th><th>role</th><th>rank</th><th>start</th><th>peak RSS</th>"
        f"<th>peak USS</th><th>peak PSS</th><th>seen</th></tr>{rows}</table>"
    )


def _memory_section(report: RunReport) -> list[str]:
    memory = report.memory
    if memory is None:
        return []
    return [
        "<h2>Memory</h2>",
        *(_finding_card(finding) for finding in memory.findings),
        *_memory_plots(report, memory),
        _process_table(memory, report.incidents),
        *(f'<p class="muted">{_e(note)}</p>' for note in memory.notes),
    ]


def _exit_status(report: RunReport) -> str:
    if not report.exit_known:
        return "exit status unknown (loaderdoctor run did not finish)"
    return f"exit code {report.exit_code}"


def _meta(report: RunReport) -> list[str]:
    signal = f" ({_e(report.signal)})" if report.signal else ""
    interrupted = " · interrupted" if report.interrupted else ""
    quarantined = (
        f" · quarantined: {_e(', '.join(map(repr, report.quarantine)))}"
        if report.quarantine
        else ""
    )
    return [
        f'<p class="meta"><code>{_e(" ".join(report.command))}</code></p>',
        f'<p class="meta">{_exit_status(report)}{signal}{interrupted}'
        f" · {format_seconds(report.duration_s)} · started {_e(report.started_at)}</p>",
        f'<p class="meta">{report.delivered.batches} batches, {report.delivered.samples} samples '
        f"delivered · {len(report.incidents)} incident(s){quarantined}</p>",
        *(
            [f'<p class="meta">OOM protection: {_e(report.oom_protection)}</p>']
            if report.oom_protection is not None
            else []
        ),
    ]


def _ranks_table(report: RunReport) -> list[str]:
    if not report.ranks:
        return []
    by_node = bool(report.nodes)  # a job's: each rank says its node, the pid is that node's

    def node(name: str | None) -> str:
        return f"<td>{_e(name or '')}</td>" if by_node else ""

    rows = "".join(
        f"<tr>{node(r.node)}<td>{r.pid}</td><td>{'' if r.rank is None else r.rank}</td>"
        f"<td>{r.loaders}</td><td>{r.delivered.batches}</td><td>{r.delivered.samples}</td>"
        f"<td>{r.incidents}</td></tr>"
        for r in report.ranks
    )
    return [
        "<h2>Processes with supervised DataLoaders</h2><table><tr>"
        f"{'<th>node</th>' if by_node else ''}<th>pid</th>"
        "<th>rank</th><th>loaders</th><th>batches</th><th>samples</th><th>incidents</th></tr>"
        f"{rows}</table>"
    ]


def _deaths_section(report: RunReport) -> list[str]:
    """The processes of the command that died outside any supervised DataLoader, uncollected."""
    if not report.process_deaths:
        return []
    rows = "".join(
        f"<tr{DIED}><td>{d.pid}</td><td>{_e(d.name)}</td><td>{d.parent_pid}</td>"
        f"<td><code>{_e(d.parent_command)}</code></td><td>{_e(d.ended)}</td>"
        f"<td>{format_seconds(d.seen_s)}</td><td>{format_seconds(d.uncollected_s)}</td>"
        f"<td>{'<br>'.join(_e(line) for line in d.kernel_log)}</td></tr>"
        for d in report.process_deaths
    )
    return [
        "<h2>Processes that died outside the supervised DataLoaders</h2>",
        '<p class="muted">Each was left uncollected by the process that started it (seen from '
        "outside, as a zombie): a pool that waits for one of them waits for ever.</p>",
        "<table><tr><th>pid</th><th>name</th><th>parent</th><th>parent's command</th>"
        "<th>ended</th><th>at</th><th>uncollected for</th><th>kernel</th></tr>"
        f"{rows}</table>",
    ]


def format_html(report: RunReport, page_dir: str | Path | None = None) -> str:
    """The page; ``page_dir``, the folder it is written to, lets it link the cause pages."""
    incidents = [_incident_card(incident, page_dir) for incident in report.incidents] or [
        '<p class="muted">None: no DataLoader worker failed.</p>'
    ]
    body = [
        *_meta(report),
        *job_meta(report),
        *nodes_section(report),
        "<h2>Incidents</h2>",
        *incidents,
        *_deaths_section(report),
        *_memory_section(report),
        *_ranks_table(report),
        *(f'<p class="muted">Note: {_e(note)}</p>' for note in report.notes),
    ]
    badge = (report.status, STATUS_COLORS.get(report.status, "#555"))
    title = "loaderdoctor job" if report.job is not None else "loaderdoctor run"
    return page(f"{title}: {report.status}", title, body, badge=badge)


def write_html(report: RunReport, report_dir: str | os.PathLike[str]) -> Path:
    """``report_dir/report.html``, written atomically: a failure keeps the previous page."""
    return write_page(format_html(report, Path(report_dir)), Path(report_dir) / HTML_NAME)
