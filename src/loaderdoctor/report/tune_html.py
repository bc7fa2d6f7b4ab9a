"""``--plot tune.html`` / ``tune.svg``: throughput and memory against workers, no dependency.

The charts are inline SVG in the style of ``report.html`` (``run_html``'s palette, CSS and tick
steps); its ``svg_plot`` draws time on the x axis, these draw worker counts.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from loaderdoctor.report.run_html import CSS, PALETTE, Line, _legend, nice_step
from loaderdoctor.report.tune import TRIAL_COLUMNS, format_snippet, trial_row
from loaderdoctor.tune.model import TuneReport

MiB = 1024 * 1024
BUDGET_COLOR = "#d62728"
BUDGET_ON_CHART = 3  # draw the budget line when it is within this factor of the peaks


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


@dataclass
class Chart:
    title: str
    lines: list[Line]
    y_unit: float
    y_suffix: str


def charts(report: TuneReport) -> list[Chart]:
    """Throughput per prefetch_factor, and memory (total and per worker), against workers."""
    by_prefetch: dict[int | None, dict[int, list[float]]] = {}
    total: dict[int, int] = {}
    per_worker: dict[int, int] = {}
    for trial in report.trials:
        workers = trial.config.num_workers
        if trial.ok and not trial.config.pin_memory:
            rates = by_prefetch.setdefault(trial.config.prefetch_factor, {})
            rates.setdefault(workers, []).append(trial.samples_per_s)
        total[workers] = max(total.get(workers, 0), trial.total_peak_bytes)
        if trial.worker_peak_bytes:
            per_worker[workers] = max(per_worker.get(workers, 0), max(trial.worker_peak_bytes))
    zero = by_prefetch.pop(None, {})
    throughput: list[Line] = []
    for index, prefetch in enumerate(sorted(p for p in by_prefetch if p is not None)):
        # 0 workers belongs to every prefetch_factor; drawn on the default's line only, so that
        # no other line runs straight from it to counts that were never measured in between
        rates = {**zero, **by_prefetch[prefetch]} if prefetch == 2 else by_prefetch[prefetch]
        points = [(float(w), sum(r) / len(r)) for w, r in sorted(rates.items())]
        throughput.append(Line(f"prefetch_factor={prefetch}", points, PALETTE[index]))
    if not throughput and zero:
        points = [(0.0, sum(zero[0]) / len(zero[0]))]
        throughput.append(Line("0 workers", points, PALETTE[0]))
    memory = [
        Line("total peak", [(float(w), float(b)) for w, b in sorted(total.items())], PALETTE[0]),
        Line(
            "peak per worker (USS)",
            [(float(w), float(b)) for w, b in sorted(per_worker.items())],
            PALETTE[1],
        ),
    ]
    budget = float(report.budget.memory_bytes)
    memory_title = "peak memory against num_workers"
    if budget <= BUDGET_ON_CHART * max(total.values(), default=0):
        points = [(0.0, budget), (float(report.max_workers), budget)]
        memory.append(Line("memory budget", points, BUDGET_COLOR, dashed=True))
    else:  # a far-away budget would flatten every measurement to the floor
        memory_title += f" (budget {budget / MiB:.0f} MiB, off the chart)"
    return [
        Chart("throughput (samples/s) against num_workers", throughput, 1.0, ""),
        Chart(memory_title, memory, MiB, "MiB"),
    ]


def chart_axes(chart: Chart, x_max: float) -> tuple[float, float, float, float]:
    """``(y_step, y_max, x_max, x_step)``: round ticks that hold every point of ``chart``."""
    y_top = max((y for line in chart.lines for _, y in line.points), default=0.0) / chart.y_unit
    y_step = nice_step(y_top or 1.0)
    y_max = max(y_step, math.ceil(y_top / y_step) * y_step)
    x_max = max(x_max, 1.0)
    return y_step, y_max, x_max, max(1.0, nice_step(x_max))


def xy_svg(chart: Chart, x_max: float, *, width: int = 940, height: int = 260) -> str:
    """A line chart with dots at the measurements: workers across, the chart's unit up."""
    left, right, top, bottom = 72, 14, 26, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    y_step, y_max, x_max, x_step = chart_axes(chart, x_max)

    def sx(x: float) -> float:
        return left + plot_w * min(max(x / x_max, 0.0), 1.0)

    def sy(value: float) -> float:
        return top + plot_h * (1 - min(value / chart.y_unit / y_max, 1.0))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 {width} {height}" '
        f'role="img"><text x="{left}" y="16" style="font-weight:600">{_e(chart.title)}</text>'
    ]
    tick = 0.0
    while tick <= y_max + 1e-9:
        y = sy(tick * chart.y_unit)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#e4e7ec"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{tick:g} {_e(chart.y_suffix)}</text>"
        )
        tick += y_step
    tick = 0.0
    while tick <= x_max + 1e-9:
        x = sx(tick)
        out.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="#f0f2f5"/>'
            f'<text x="{x:.1f}" y="{height - 16}" text-anchor="middle">{tick:g}</text>'
        )
        tick += x_step
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 2}" text-anchor="middle">'
        "num_workers</text>"
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
        'stroke="#c9ced6"/>'
    )
    for line in chart.lines:
        if not line.points:
            continue
        coords = " ".join(f"{sx(x):.1f},{sy(v):.1f}" for x, v in line.points)
        dash = ' stroke-dasharray="5 4"' if line.dashed else ""
        out.append(
            f'<polyline points="{coords}" fill="none" stroke="{line.color}" stroke-width="1.8"'
            f"{dash}><title>{_e(line.label)}</title></polyline>"
        )
        if not line.dashed:
            out.extend(
                f'<circle cx="{sx(x):.1f}" cy="{sy(v):.1f}" r="3" fill="{line.color}"/>'
                for x, v in line.points
            )
    out.append("</svg>")
    return "".join(out)


def format_svg(report: TuneReport) -> str:
    """Both charts stacked in one standalone SVG document."""
    height = 260
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="940" height="{2 * height}" '
        f'viewBox="0 0 940 {2 * height}"><style>text{{font:11px sans-serif;fill:#444}}</style>'
        '<rect width="100%" height="100%" fill="#fff"/>'
    ]
    for index, chart in enumerate(charts(report)):
        inner = xy_svg(chart, report.max_workers, height=height)
        inner = inner.replace('width="100%"', f'y="{index * height}" width="940" height="{height}"')
        parts.append(inner)
        # the legend of a standalone SVG: one label per line, top right
        for number, line in enumerate(chart.lines):
            y = index * height + 14 + 13 * number
            parts.append(
                f'<line x1="700" y1="{y - 4}" x2="714" y2="{y - 4}" stroke="{line.color}" '
                f'stroke-width="3"/><text x="720" y="{y}">{_e(line.label)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts) + "\n"


def format_html(report: TuneReport) -> str:
    rows = []
    for trial in report.trials:
        cells = "".join(f"<td>{_e(cell)}</td>" for cell in trial_row(trial, False))
        rows.append(f"<tr>{cells}</tr>")
    header = "".join(f"<th>{_e(column)}</th>" for column in TRIAL_COLUMNS)
    plots = "".join(
        f'<div class="plot">{xy_svg(chart, report.max_workers)}{_legend(chart.lines)}</div>'
        for chart in charts(report)
    )
    skipped = "".join(f"<li>{_e(s.config.label())}: {_e(s.reason)}</li>" for s in report.skipped)
    evidence = "".join(f"<li>{_e(line)}</li>" for line in report.bound.evidence)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>loaderdoctor tune: {_e(report.spec)}</title><style>{CSS}</style></head><body>"
        f"<main><h1>loaderdoctor tune</h1>"
        f'<p class="meta"><code>{_e(report.spec)}</code>, batch_size {report.batch_size}, '
        f"{report.usable_cores} usable cores, memory budget "
        f"{report.budget.memory_bytes / MiB:.0f} MiB ({_e(report.budget.source)})</p>"
        f'<p class="meta">{report.recommended_samples_per_s:.0f} samples/s steady state; '
        f"{len(report.trials)} trials in {report.seconds:.1f} s; {_e(report.stop_reason)}</p>"
        f"<h2>Recommended</h2><pre>{_e(format_snippet(report))}</pre>"
        f'<h2>Bound: {_e(report.bound.id)}</h2><div class="card"><h3>'
        f"{_e(report.bound.title)}</h3><ul>{evidence}</ul></div>"
        f"<h2>Throughput and memory</h2>{plots}"
        f"<h2>Measured</h2><table><tr>{header}</tr>{''.join(rows)}</table>"
        + (f"<h2>Not run (over budget)</h2><ul>{skipped}</ul>" if skipped else "")
        + "</main></body></html>\n"
    )
