"""``scan.html``: one self-contained page (inline CSS and SVG, no network) for a scan report."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from loaderdoctor.report.html.chart import Chart, Line, svg_chart
from loaderdoctor.report.html.page import (
    PALETTE,
    STATUS_COLORS,
    docs_href,
    legend,
    page,
    write_page,
)
from loaderdoctor.report.html.page import escape as _e
from loaderdoctor.report.scan import format_settings
from loaderdoctor.scan.model import Profile, ScanReport
from loaderdoctor.units import MiB, format_mib, format_ms, format_seconds

HTML_NAME = "scan.html"
MAX_ROWS = 200  # a page per finding kind, not the whole dataset: the JSON has every row
MARKER_COLUMNS = 400  # bad-sample rules closer than 1/400 of the axis merge into one
LABEL_GAP = 0.16  # a rule is labelled only this fraction of the axis away from the last label
TIME_COLOR = PALETTE[0]
MEMORY_COLOR = PALETTE[3]


def cause_href(cause: str, page_dir: str | Path | None) -> str | None:
    """A link to the cause's page (``docs/causes/<id>.md``) from a page in ``page_dir``
    (``html.docs_href``), if there is one."""
    from loaderdoctor.forensics.catalog import CAUSES

    known = CAUSES.get(cause)
    return docs_href(known.docs_url, page_dir) if known is not None else None


def verdict(report: ScanReport) -> tuple[str, str]:
    """The badge: its words and its colour (red for bad samples, amber for outliers alone)."""
    if report.bad:
        return f"{len(report.bad)} bad", STATUS_COLORS["crashed"]
    if report.outliers:
        return f"{len(report.outliers)} outliers", STATUS_COLORS["healed"]
    return "clean", STATUS_COLORS["ok"]


def profile_segments(
    values: Sequence[float | None], step: int, label: str, color: str, scale: float = 1.0
) -> list[Line]:
    """One line per run of buckets with a value: an all-bad bucket (``None``) breaks the line."""
    lines: list[Line] = []
    points: list[tuple[float, float]] = []
    for bucket, value in enumerate(values):
        if value is None:
            if points:
                lines.append(Line(label, points, color))
            points = []
        else:
            points.append((float(bucket * step), value * scale))
    if points:
        lines.append(Line(label, points, color))
    return lines


def bad_markers(report: ScanReport, x_max: float) -> list[tuple[float, str]]:
    """A red rule per bad index, merged where they would overlap; labels only where they fit."""
    groups: list[list[int]] = []
    for index in sorted(bad.index for bad in report.bad):
        if groups and index - groups[-1][0] <= x_max / MARKER_COLUMNS:
            groups[-1].append(index)
        else:
            groups.append([index])
    causes = {bad.index: bad.cause for bad in report.bad}
    markers = []
    last_label: int | None = None
    for first, *rest in groups:
        label = ""
        if last_label is None or (first - last_label) / x_max >= LABEL_GAP:
            label = f"#{first} {causes[first]}" + (f" +{len(rest)}" if rest else "")
            last_label = first
        markers.append((float(first), label))
    return markers


def _plots(report: ScanReport, profile: Profile | None) -> str:
    parts = ["<h2>Cost along the dataset</h2>"]
    if profile is None or not (profile.seconds or profile.peak_bytes):
        parts.append(
            '<p class="muted">No per-sample profile in this report '
            "(it was written by an older loaderdoctor).</p>"
        )
        return "".join(parts)
    x_max = float(max(report.total - 1, 1))
    per = "" if profile.step == 1 else f", worst of each {profile.step} samples"
    markers = bad_markers(report, x_max)
    times = profile_segments(profile.seconds, profile.step, "time (ms)", TIME_COLOR, 1000.0)
    memory = profile_segments(
        [None if v is None else float(v) for v in profile.peak_bytes],
        profile.step,
        "peak memory (MiB)",
        MEMORY_COLOR,
    )
    marked = f" · bad samples as red rules ({len(report.bad)})" if report.bad else ""
    if times:
        parts.append(
            f'<div class="plot"><h3>Time per sample (ms{per}) against index{marked}</h3>'
            + svg_chart(Chart(times, x_max, 1.0, "ms", markers=markers))
            + legend(times[:1])
            + "</div>"
        )
    if memory and not any(value for line in memory for _, value in line.points):
        parts.append(  # a flat line at 0 says nothing a sentence cannot
            '<p class="muted">No sample added memory its worker could measure (every peak '
            "0 MiB): there is no memory plot.</p>"
        )
    elif memory:
        parts.append(
            f'<div class="plot"><h3>Memory a sample adds to its worker (peak MiB{per}) '
            "against index</h3>"
            + svg_chart(Chart(memory, x_max, MiB, "MiB"))
            + legend(memory[:1])
            + "</div>"
        )
    if not (times or memory):
        parts.append('<p class="muted">No sample loaded, so there is nothing to plot.</p>')
    return "".join(parts)


def _more(count: int) -> str:
    if count <= MAX_ROWS:
        return ""
    return f'<p class="muted">… and {count - MAX_ROWS} more (the JSON report has them all).</p>'


def _file(file: str | None) -> str:
    return f"<code>{_e(file)}</code>" if file else '<span class="muted">-</span>'


def _bad_section(report: ScanReport, page_dir: str | Path | None) -> str:
    parts = ["<h2>Bad samples</h2>"]
    if not report.bad:
        parts.append('<p class="muted">None: every sample loaded.</p>')
        return "".join(parts)
    parts.append(
        "<table><tr><th>index</th><th>cause</th><th>file</th><th>message</th><th>evidence</th></tr>"
    )
    for bad in report.bad[:MAX_ROWS]:
        href = cause_href(bad.cause, page_dir)
        cause = f'<span class="cause">{_e(bad.cause)}</span>'
        if href:
            cause = f'<a href="{_e(href)}">{cause}</a>'
        evidence = (
            f"<details><summary>{len(bad.evidence)} line(s)</summary><ul>"
            + "".join(f"<li>{_e(line)}</li>" for line in bad.evidence)
            + "</ul></details>"
            if bad.evidence
            else '<span class="muted">-</span>'
        )
        parts.append(
            f'<tr><td class="num">{bad.index}</td><td>{cause}</td><td>{_file(bad.file)}</td>'
            f"<td>{_e(bad.message)}</td><td>{evidence}</td></tr>"
        )
    parts.append("</table>")
    parts.append(_more(len(report.bad)))
    parts.append(
        '<p class="muted">The scan wrote them to its quarantine file: '
        "<code>loaderdoctor.DataLoader(..., quarantine=PATH)</code> skips them.</p>"
    )
    return "".join(parts)


def _flaky_section(report: ScanReport) -> str:
    if not report.flaky:
        return ""
    parts = [
        "<h2>Flaky samples</h2>",
        '<p class="muted">Each killed a worker once, then loaded when re-tried alone: not '
        "quarantined, but where an intermittent crash comes from.</p>",
        "<table><tr><th>index</th><th>cause</th><th>file</th><th>message</th><th>evidence</th></tr>",
    ]
    for flaky in report.flaky[:MAX_ROWS]:
        evidence = "".join(f"<li>{_e(line)}</li>" for line in flaky.evidence)
        parts.append(
            f'<tr><td class="num">{flaky.index}</td><td><span class="cause">{_e(flaky.cause)}'
            f"</span></td><td>{_file(flaky.file)}</td><td>{_e(flaky.message)}</td>"
            f"<td><ul>{evidence}</ul></td></tr>"
        )
    parts.append("</table>")
    parts.append(_more(len(report.flaky)))
    return "".join(parts)


def _outlier_section(report: ScanReport) -> str:
    if not report.outliers:
        return ""
    expects = f" (default_collate expects <code>{_e(report.structure)}</code>)"
    parts = [
        f"<h2>Outliers{expects if report.structure else ''}</h2>",
        '<p class="muted">These load, but their structure differs from the majority\'s: '
        "a batch that holds one fails to collate.</p>",
        "<table><tr><th>index</th><th>structure</th><th>expected</th><th>file</th></tr>",
    ]
    for outlier in report.outliers[:MAX_ROWS]:
        parts.append(
            f'<tr><td class="num">{outlier.index}</td><td><code>{_e(outlier.structure)}</code>'
            f"</td><td><code>{_e(outlier.expected)}</code></td><td>{_file(outlier.file)}</td></tr>"
        )
    parts.append("</table>")
    parts.append(_more(len(report.outliers)))
    return "".join(parts)


def _ranking(title: str, unit: str, rows: Sequence[tuple[int, str, str | None]]) -> str:
    """A table of samples by a cost (already formatted in ``unit``)."""
    if not rows:
        return ""
    body = "".join(
        f'<tr><td class="num">{index}</td><td class="num">{value}</td><td>{_file(file)}</td></tr>'
        for index, value, file in rows
    )
    return (
        f"<h2>{title}</h2><table><tr><th>index</th><th>{unit}</th><th>file</th></tr>{body}</table>"
    )


def _meta(report: ScanReport) -> list[str]:
    settings = format_settings(report)
    flaky = f"{len(report.flaky)} flaky · " if report.flaky else ""
    parts = [
        f'<p class="meta"><code>{_e(report.spec)}</code></p>',
        f'<p class="meta">{report.total} samples, {report.scanned} loaded · '
        f"{len(report.bad)} bad · {len(report.outliers)} outlier(s) · {flaky}"
        f"{format_seconds(report.seconds)} "
        f"({report.throughput:.1f} samples/s, {report.num_workers} workers)</p>",
    ]
    if settings:
        parts.append(f'<p class="meta">settings: {_e(settings)}</p>')
    return parts


def format_html(report: ScanReport, page_dir: str | Path | None = None) -> str:
    """The page; ``page_dir``, the folder it is written to, lets it link the cause pages."""
    words, color = verdict(report)
    slowest = [(slow.index, slow.seconds, slow.file) for slow in report.slowest]
    hungriest = [(hungry.index, hungry.peak_bytes, hungry.file) for hungry in report.hungriest]
    body = [
        *_meta(report),
        _bad_section(report, page_dir),
        _flaky_section(report),
        _outlier_section(report),
        _plots(report, report.profile),
        _ranking("Slowest samples", "ms", [(i, format_ms(s), f) for i, s, f in slowest]),
        _ranking(
            "Memory-hungry samples",
            "peak MiB",
            [(i, format_mib(b, decimals=1), f) for i, b, f in hungriest],
        ),
    ]
    return page(f"loaderdoctor scan: {words}", "loaderdoctor scan", body, badge=(words, color))


def write_html(report: ScanReport, path: str | os.PathLike[str]) -> Path:
    """Write the page to ``path`` (a file, or a folder to hold ``scan.html``), atomically."""
    target = Path(path)
    if target.is_dir():
        target = target / HTML_NAME
    return write_page(format_html(report, target.parent), target)
