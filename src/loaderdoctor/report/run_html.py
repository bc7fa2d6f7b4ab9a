"""``report.html``: one self-contained page (inline CSS and SVG, no network) for a run report."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from loaderdoctor.envchecks import human_bytes
from loaderdoctor.runner.model import MemoryReport, ProcessMemory, RunIncident, RunReport

HTML_NAME = "report.html"
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
    "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#aec7e8",
)  # fmt: skip
INCIDENT_COLOR = "#d62728"
STATUS_COLORS = {"ok": "#2ca02c", "healed": "#e6a100", "crashed": "#d62728"}
MiB = 1024 * 1024

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;
background:#f5f6f8}
main{max-width:1000px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600;
font-size:13px;vertical-align:middle;margin-left:8px}
.meta{color:#555;margin:2px 0}.meta code{background:#e9ebef;padding:1px 5px;border-radius:4px}
.card{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:14px 16px;margin:10px 0}
.card.incident{border-left:4px solid #d62728}.card.finding{border-left:4px solid #e6a100}
.card h3{margin:0 0 6px;font-size:15px}.cause{font-family:ui-monospace,monospace;color:#b31b1b}
.where{color:#444;margin:0 0 8px}ul{margin:4px 0 8px 0;padding-left:20px}
.fixes li{color:#185c22}pre{background:#f1f3f6;padding:8px;border-radius:6px;overflow:auto;
font-size:12px}table{border-collapse:collapse;background:#fff}
td,th{border:1px solid #dde1e7;padding:4px 10px;text-align:left;font-size:13px}
th{background:#eef0f4}.legend{display:flex;flex-wrap:wrap;gap:6px 16px;font-size:12px;
margin:4px 0 0}.swatch{display:inline-block;width:12px;height:3px;margin-right:5px;
vertical-align:middle}.plot{background:#fff;border:1px solid #dde1e7;border-radius:8px;
padding:8px 10px;margin:10px 0}.plot h3{margin:2px 0 4px;font-size:14px}
.muted{color:#777}svg text{font:11px system-ui,sans-serif;fill:#444}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


@dataclass
class Line:
    label: str
    points: list[tuple[float, float]]
    color: str
    dashed: bool = False


def nice_step(span: float, target_ticks: int = 5) -> float:
    """1, 2 or 5 times a power of ten, so that about ``target_ticks`` ticks cover ``span``."""
    if span <= 0:
        return 1.0
    raw = span / target_ticks
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return factor * power
    return 10 * power


def svg_plot(
    lines: Sequence[Line],
    markers: Sequence[tuple[float, str]],
    *,
    x_max: float,
    y_unit: float = MiB,
    y_suffix: str = "MiB",
    x_suffix: str = " s",
    width: int = 940,
    height: int = 240,
) -> str:
    """A line chart as inline SVG: time across (or ``x_suffix``), bytes up, incidents as red rules."""
    left, right, top, bottom = 64, 14, 12, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    y_top = max((y for line in lines for _, y in line.points), default=0.0) / y_unit
    y_step = nice_step(y_top or 1.0)
    y_max = max(y_step, math.ceil(y_top / y_step) * y_step)
    x_max = max(x_max, 1e-9)
    x_step = nice_step(x_max)

    def sx(t: float) -> float:
        return left + plot_w * min(max(t / x_max, 0.0), 1.0)

    def sy(value: float) -> float:
        return top + plot_h * (1 - min(value / y_unit / y_max, 1.0))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 {width} {height}" '
        f'role="img">'
    ]
    tick = 0.0
    while tick <= y_max + 1e-9:
        y = sy(tick * y_unit)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#e4e7ec"/>'
        )
        out.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:g} {y_suffix}</text>'
        )
        tick += y_step
    tick = 0.0
    while tick <= x_max + 1e-9:
        x = sx(tick)
        out.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="#f0f2f5"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{height - 10}" text-anchor="middle">{tick:g}{_e(x_suffix)}</text>'
        )
        tick += x_step
    out.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#c9ced6"/>'
    )
    for line in lines:
        if not line.points:
            continue
        coords = " ".join(f"{sx(t):.1f},{sy(v):.1f}" for t, v in line.points)
        dash = ' stroke-dasharray="5 4"' if line.dashed else ""
        out.append(
            f'<polyline points="{coords}" fill="none" stroke="{line.color}" stroke-width="1.8"'
            f"{dash}><title>{_e(line.label)}</title></polyline>"
        )
        if len(line.points) == 1:
            t, v = line.points[0]
            out.append(f'<circle cx="{sx(t):.1f}" cy="{sy(v):.1f}" r="2.5" fill="{line.color}"/>')
    for t, label in markers:
        x = sx(t)
        out.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" '
            f'stroke="{INCIDENT_COLOR}" stroke-width="1.5" stroke-dasharray="4 3">'
            f"<title>{_e(label)}</title></line>"
        )
        anchor = "end" if x > left + plot_w * 0.8 else "start"
        dx = -4 if anchor == "end" else 4
        out.append(
            f'<text x="{x + dx:.1f}" y="{top + 12}" text-anchor="{anchor}" '
            f'style="fill:{INCIDENT_COLOR}">{_e(label)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _legend(lines: Sequence[Line]) -> str:
    items = "".join(
        f'<span><span class="swatch" style="background:{line.color}"></span>{_e(line.label)}</span>'
        for line in lines
    )
    return f'<div class="legend">{items}</div>'


def _process_label(process: ProcessMemory) -> str:
    rank = f"rank {process.rank} " if process.rank is not None else ""
    if process.role == "main":
        return f"{rank}main pid {process.pid} (RSS)"
    return f"{rank}worker pid {process.pid}"


def memory_lines(memory: MemoryReport) -> list[Line]:
    """Each worker's private memory (USS, else PSS, else RSS); main processes dashed (RSS)."""
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
        lines.append(
            Line(label, points, PALETTE[number % len(PALETTE)], dashed=process.role == "main")
        )
    return lines


def incident_markers(incidents: Sequence[RunIncident]) -> list[tuple[float, str]]:
    markers = []
    for incident in incidents:
        if incident.time_s is not None:
            where = f" #{incident.indices[0]}" if incident.indices else ""
            markers.append((incident.time_s, f"{incident.cause}{where}"))
    return markers


def docs_href(incident: RunIncident) -> str | None:
    """The cause's page in a source checkout (``docs/causes/<id>.md``), as a file URL, if there."""
    if not incident.docs:
        return None
    import loaderdoctor

    root = Path(loaderdoctor.__file__).resolve().parents[2]
    page = root / incident.docs
    return page.as_uri() if page.is_file() else None


def _incident_card(incident: RunIncident) -> str:
    where = []
    if incident.rank is not None:
        where.append(f"rank {incident.rank}")
    if incident.worker_id is not None:
        where.append(
            f"worker {incident.worker_id}" + (f" (pid {incident.pid})" if incident.pid else "")
        )
    if incident.indices:
        where.append("sample " + ", ".join(_e(repr(i)) for i in incident.indices[:20]))
    if incident.sample_file:
        where.append(f"file <code>{_e(incident.sample_file)}</code>")
    if incident.batch is not None:
        where.append(f"batch {incident.batch}")
    if incident.epoch is not None:
        where.append(f"epoch {incident.epoch}")
    if incident.signal:
        where.append(_e(incident.signal))
    if incident.time_s is not None:
        where.append(f"at {incident.time_s:.1f} s")
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
    if incident.fixes:
        parts.append('<b>Fix</b><ul class="fixes">')
        parts.extend(f"<li>{_e(line)}</li>" for line in incident.fixes)
        parts.append("</ul>")
    stack = (incident.diagnosis or {}).get("python_stack")
    if stack:
        parts.append(
            f"<details><summary>Python stack of the worker</summary><pre>{_e(stack)}</pre></details>"
        )
    if incident.docs:
        href = docs_href(incident)
        label = _e(incident.docs)
        parts.append(
            f'<p class="muted">More: <a href="{_e(href)}">{label}</a></p>'
            if href
            else f'<p class="muted">More: <code>{label}</code></p>'
        )
    parts.append("</div>")
    return "".join(parts)


def _memory_section(report: RunReport) -> str:
    memory = report.memory
    if memory is None:
        return ""
    markers = incident_markers(report.incidents)
    x_max = max(
        [report.duration_s, *(t for t, _ in memory.shm_series)]
        + [row[0] for p in memory.processes for row in p.series]
    )
    parts = ["<h2>Memory</h2>"]
    for finding in memory.findings:
        parts.append(
            f'<div class="card finding"><h3><span class="cause">{_e(finding.id)}</span> — '
            f"{_e(finding.title)}</h3><p>{_e(finding.explanation)}</p><b>Evidence</b><ul>"
            + "".join(f"<li>{_e(line)}</li>" for line in finding.evidence)
            + '</ul><b>Fix</b><ul class="fixes">'
            + "".join(f"<li>{_e(line)}</li>" for line in finding.fixes)
            + "</ul>"
            + (
                f'<p class="muted">More: <a href="{_e(finding.docs)}">{_e(finding.docs)}</a></p>'
                if finding.docs
                else ""
            )
            + "</div>"
        )
    lines = memory_lines(memory)
    workers = [line for line in lines if not line.dashed]
    mains = [line for line in lines if line.dashed]
    for title, group in (
        ("DataLoader workers: private memory (USS) of each", workers),
        ("Processes that own the DataLoaders: RSS", mains),
    ):
        if group:
            parts.append(
                f'<div class="plot"><h3>{title}</h3>'
                + svg_plot(group, markers, x_max=x_max)
                + _legend(group)
                + "</div>"
            )
    if not lines:
        parts.append('<p class="muted">No process was sampled.</p>')
    if memory.shm_series:
        shm = [Line("/dev/shm used", [(t, float(v)) for t, v in memory.shm_series], "#6a3d9a")]
        total = f" of {human_bytes(memory.shm_total_bytes)}" if memory.shm_total_bytes else ""
        parts.append(
            f'<div class="plot"><h3>/dev/shm used (peak {human_bytes(memory.shm_peak_used_bytes)}'
            f"{total})</h3>" + svg_plot(shm, markers, x_max=x_max) + "</div>"
        )
    rows = "".join(
        f"<tr><td>{p.pid}</td><td>{p.role}</td><td>{'' if p.rank is None else p.rank}</td>"
        f"<td>{_e(p.start_method or '')}</td><td>{human_bytes(p.peak_rss_bytes)}</td>"
        f"<td>{human_bytes(p.peak_uss_bytes) if p.peak_uss_bytes is not None else '-'}</td>"
        f"<td>{human_bytes(p.peak_pss_bytes) if p.peak_pss_bytes is not None else '-'}</td>"
        f"<td>{p.first_seen_s:.1f}–{p.last_seen_s:.1f} s</td></tr>"
        for p in memory.processes
    )
    if rows:
        parts.append(
            "<table><tr><th>pid</th><th>role</th><th>rank</th><th>start</th><th>peak RSS</th>"
            f"<th>peak USS</th><th>peak PSS</th><th>seen</th></tr>{rows}</table>"
        )
    parts.extend(f'<p class="muted">{_e(note)}</p>' for note in memory.notes)
    return "".join(parts)


def format_html(report: RunReport) -> str:
    color = STATUS_COLORS.get(report.status, "#555")
    command = " ".join(report.command)
    signal = f" ({_e(report.signal)})" if report.signal else ""
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>loaderdoctor run: {_e(report.status)}</title><style>{CSS}</style></head>",
        "<body><main>",
        f'<h1>loaderdoctor run<span class="badge" style="background:{color}">'
        f"{_e(report.status)}</span></h1>",
        f'<p class="meta"><code>{_e(command)}</code></p>',
        f'<p class="meta">exit code {report.exit_code}{signal}'
        + (" · interrupted" if report.interrupted else "")
        + f" · {report.duration_s:.1f} s · started {_e(report.started_at)}</p>",
        f'<p class="meta">{report.delivered.batches} batches, {report.delivered.samples} samples '
        f"delivered · {len(report.incidents)} incident(s)"
        + (
            f" · quarantined: {_e(', '.join(map(repr, report.quarantine)))}"
            if report.quarantine
            else ""
        )
        + "</p>",
    ]
    parts.append("<h2>Incidents</h2>")
    if report.incidents:
        parts.extend(_incident_card(incident) for incident in report.incidents)
    else:
        parts.append('<p class="muted">None: no DataLoader worker failed.</p>')
    parts.append(_memory_section(report))
    if report.ranks:
        parts.append("<h2>Processes with supervised DataLoaders</h2><table><tr><th>pid</th>")
        parts.append(
            "<th>rank</th><th>loaders</th><th>batches</th><th>samples</th><th>incidents</th></tr>"
        )
        for r in report.ranks:
            parts.append(
                f"<tr><td>{r.pid}</td><td>{'' if r.rank is None else r.rank}</td><td>{r.loaders}</td>"
                f"<td>{r.delivered.batches}</td><td>{r.delivered.samples}</td><td>{r.incidents}</td></tr>"
            )
        parts.append("</table>")
    parts.extend(f'<p class="muted">Note: {_e(note)}</p>' for note in report.notes)
    parts.append("</main></body></html>\n")
    return "".join(parts)


def write_html(report: RunReport, report_dir: Path) -> Path:
    path = report_dir / HTML_NAME
    path.write_text(format_html(report), encoding="utf-8")
    return path
