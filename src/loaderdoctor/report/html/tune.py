"""``--plot tune.html`` / ``tune.svg``: throughput and memory against workers, no dependency.

The charts are ``html.chart``'s, as on the run and scan pages: worker counts across.
"""

from __future__ import annotations

from loaderdoctor.report.html.chart import Chart, Line, svg_chart
from loaderdoctor.report.html.page import PALETTE, legend, page
from loaderdoctor.report.html.page import escape as _e
from loaderdoctor.report.output import printable
from loaderdoctor.report.tune import TRIAL_COLUMNS, format_snippet, trial_row
from loaderdoctor.tune.model import TuneReport
from loaderdoctor.units import MiB, format_bytes, format_seconds

BUDGET_COLOR = "#d62728"
BUDGET_ON_CHART = 3  # draw the budget line when it is within this factor of the peaks
CHART_HEIGHT = 260


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
        memory_title += f" (budget {format_bytes(budget)}, off the chart)"
    return [
        _chart(report, throughput, "throughput (samples/s) against num_workers", 1.0, ""),
        _chart(report, memory, memory_title, MiB, "MiB"),
    ]


def _chart(report: TuneReport, lines: list[Line], title: str, unit: float, suffix: str) -> Chart:
    return Chart(
        lines,
        report.max_workers,
        unit,
        suffix,
        x_label="num_workers",
        title=title,
        dots=True,
        whole_x=True,
    )


def format_svg(report: TuneReport) -> str:
    """Both charts stacked in one standalone SVG document."""
    height = CHART_HEIGHT
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="940" height="{2 * height}" '
        f'viewBox="0 0 940 {2 * height}"><style>text{{font:11px sans-serif;fill:#444}}</style>'
        '<rect width="100%" height="100%" fill="#fff"/>'
    ]
    for index, chart in enumerate(charts(report)):
        size = f'y="{index * height}" width="940" height="{height}"'
        parts.append(svg_chart(chart, height=height, attributes=size))
        # the legend of a standalone SVG: one label per line, top right
        for number, line in enumerate(chart.lines):
            y = index * height + 14 + 13 * number
            parts.append(
                f'<line x1="700" y1="{y - 4}" x2="714" y2="{y - 4}" stroke="{line.color}" '
                f'stroke-width="3"/><text x="720" y="{y}">{_e(line.label)}</text>'
            )
    parts.append("</svg>\n")
    return printable("".join(parts))[0]


def format_html(report: TuneReport) -> str:
    rows = []
    for trial in report.trials:
        cells = "".join(f"<td>{_e(cell)}</td>" for cell in trial_row(trial, False))
        rows.append(f"<tr>{cells}</tr>")
    header = "".join(f"<th>{_e(column)}</th>" for column in TRIAL_COLUMNS)
    plots = "".join(
        f'<div class="plot">{svg_chart(chart, height=CHART_HEIGHT)}{legend(chart.lines)}</div>'
        for chart in charts(report)
    )
    skipped = "".join(f"<li>{_e(s.config.label())}: {_e(s.reason)}</li>" for s in report.skipped)
    evidence = "".join(f"<li>{_e(line)}</li>" for line in report.bound.evidence)
    body = [
        f'<p class="meta"><code>{_e(report.spec)}</code>, batch_size {report.batch_size}, '
        f"{report.usable_cores} usable cores, memory budget "
        f"{format_bytes(report.budget.memory_bytes)} ({_e(report.budget.source)})</p>",
        f'<p class="meta">{report.recommended_samples_per_s:.0f} samples/s steady state; '
        f"{len(report.trials)} trials in {format_seconds(report.seconds)}; "
        f"{_e(report.stop_reason)}</p>",
        f"<h2>Recommended</h2><pre>{_e(format_snippet(report))}</pre>",
        f'<h2>{_e(_bound_heading(report))}</h2><div class="card"><h3>'
        f"{_e(report.bound.title)}</h3><ul>{evidence}</ul></div>",
        f"<h2>Throughput and memory</h2>{plots}",
        f"<h2>Measured</h2><table><tr>{header}</tr>{''.join(rows)}</table>",
    ]
    if skipped:
        body.append(f"<h2>Not run (over budget)</h2><ul>{skipped}</ul>")
    notes = [
        *(f"trial {n} ({t.config.label()}): {t.note}" for n, t in enumerate(report.trials, 1)
          if t.note),
        *report.notes,
    ]  # fmt: skip
    if notes:
        body.append(f"<h2>Notes</h2><ul>{''.join(f'<li>{_e(note)}</li>' for note in notes)}</ul>")
    return page(f"loaderdoctor tune: {report.spec}", "loaderdoctor tune", body)


def _bound_heading(report: TuneReport) -> str:
    """No rate, no bound: a search that measured nothing says so (its title says why)."""
    return (
        "Nothing measured" if report.bound.id == "nothing-measured" else f"Bound: {report.bound.id}"
    )
