"""The one line chart of every report: memory over time (run), cost along the index (scan),
throughput and memory against workers (tune).

``layout`` decides the geometry (round ticks, pixel positions) once; ``svg_chart`` draws it as
inline SVG, and ``report.tune_plot`` paints the same layout with Pillow for ``--plot x.png``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

MARKER_COLOR = "#d62728"
# Marker labels (11 px system-ui, see report.html's CSS) are laid out from a width estimate wide
# enough for any of its glyphs' averages, in rows under the plot's top edge: a label that would
# touch another moves down a row, and one that fits no row is left to its rule's tooltip.
LABEL_CHAR_W = 6.6
LABEL_ROW_H = 15  # an 11 px label's box, ascent to descent, is about 14 px high
LABEL_GAP_PX = 6
MAX_LABEL_ROWS = 4
LABEL_HALO = "paint-order:stroke;stroke:#fff;stroke-width:3px"  # legible across the next rules


@dataclass
class Line:
    label: str
    points: list[tuple[float, float]]
    color: str
    dashed: bool = False


@dataclass
class Chart:
    """What to draw: lines over ``[0, x_max]``, y in ``y_unit``s, and red vertical markers."""

    lines: Sequence[Line]
    x_max: float
    y_unit: float = 1.0
    y_suffix: str = ""
    x_suffix: str = ""
    x_label: str = ""  # under the x axis
    title: str = ""  # inside the chart, above the plot
    markers: Sequence[tuple[float, str]] = ()  # (x, label): an incident, a bad sample
    dots: bool = False  # a dot at each point of a solid line (few, discrete measurements)
    whole_x: bool = False  # x is a count: ticks at least 1 apart, the axis at least 0..1


@dataclass
class Layout:
    """Pixel geometry of a chart inside a ``width`` x ``height`` box."""

    chart: Chart
    width: int
    height: int
    left: int
    top: int
    plot_w: int
    plot_h: int
    x_max: float
    x_step: float
    y_max: float
    y_step: float
    x_ticks: list[float] = field(default_factory=list)
    y_ticks: list[float] = field(default_factory=list)

    def sx(self, x: float) -> float:
        return self.left + self.plot_w * min(max(x / self.x_max, 0.0), 1.0)

    def sy(self, value: float) -> float:
        """``value`` in the data's unit (bytes, say), not in ``y_unit``s."""
        return self.top + self.plot_h * (1 - min(value / self.chart.y_unit / self.y_max, 1.0))

    @property
    def bottom(self) -> float:
        return self.top + self.plot_h


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


def _ticks(maximum: float, step: float) -> list[float]:
    ticks, tick = [], 0.0
    while tick <= maximum + 1e-9:
        ticks.append(tick)
        tick += step
    return ticks


def layout(chart: Chart, width: int, height: int) -> Layout:
    """Round ticks that hold every point; margins for the labels the chart has."""
    left, right = 72, 14
    top = 26 if chart.title else 12
    bottom = 34 if chart.x_label else 30
    y_top = max((y for line in chart.lines for _, y in line.points), default=0.0) / chart.y_unit
    y_step = nice_step(y_top or 1.0)
    y_max = max(y_step, math.ceil(y_top / y_step) * y_step)
    if chart.whole_x:
        x_max = max(chart.x_max, 1.0)
        x_step = max(1.0, nice_step(x_max))
    else:
        x_max = max(chart.x_max, 1e-9)
        x_step = nice_step(x_max)
    return Layout(
        chart,
        width,
        height,
        left,
        top,
        width - left - right,
        height - top - bottom,
        x_max,
        x_step,
        y_max,
        y_step,
        _ticks(x_max, x_step),
        _ticks(y_max, y_step),
    )


def y_label(chart: Chart, tick: float) -> str:
    return f"{tick:g} {chart.y_suffix}".strip()


def x_label(chart: Chart, tick: float) -> str:
    return f"{tick:g}{chart.x_suffix}"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _svg_axes(box: Layout) -> list[str]:
    chart, right_edge = box.chart, box.left + box.plot_w
    out = []
    if chart.title:
        out.append(f'<text x="{box.left}" y="16" style="font-weight:600">{_e(chart.title)}</text>')
    for tick in box.y_ticks:
        y = box.sy(tick * chart.y_unit)
        out.append(
            f'<line x1="{box.left}" y1="{y:.1f}" x2="{right_edge}" y2="{y:.1f}" stroke="#e4e7ec"/>'
            f'<text x="{box.left - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{_e(y_label(chart, tick))}</text>"
        )
    label_y = box.height - (16 if chart.x_label else 10)
    for tick in box.x_ticks:
        x = box.sx(tick)
        out.append(
            f'<line x1="{x:.1f}" y1="{box.top}" x2="{x:.1f}" y2="{box.bottom}" stroke="#f0f2f5"/>'
            f'<text x="{x:.1f}" y="{label_y}" text-anchor="middle">{_e(x_label(chart, tick))}</text>'
        )
    if chart.x_label:
        out.append(
            f'<text x="{box.left + box.plot_w / 2:.1f}" y="{box.height - 2}" '
            f'text-anchor="middle">{_e(chart.x_label)}</text>'
        )
    out.append(
        f'<rect x="{box.left}" y="{box.top}" width="{box.plot_w}" height="{box.plot_h}" '
        'fill="none" stroke="#c9ced6"/>'
    )
    return out


def _svg_lines(box: Layout) -> list[str]:
    out = []
    for line in box.chart.lines:
        if not line.points:
            continue
        coords = " ".join(f"{box.sx(x):.1f},{box.sy(v):.1f}" for x, v in line.points)
        dash = ' stroke-dasharray="5 4"' if line.dashed else ""
        out.append(
            f'<polyline points="{coords}" fill="none" stroke="{line.color}" stroke-width="1.8"'
            f"{dash}><title>{_e(line.label)}</title></polyline>"
        )
        dotted = line.points if box.chart.dots and not line.dashed else []
        if len(line.points) == 1:  # a line of one point draws nothing: show the point
            dotted = line.points
        out.extend(
            f'<circle cx="{box.sx(x):.1f}" cy="{box.sy(v):.1f}" r="2.5" fill="{line.color}"/>'
            for x, v in dotted
        )
    return out


def label_rows(box: Layout) -> list[tuple[float, str, str, int]]:
    """Where each marker's label goes: ``(x, anchor, label, row)``, in rows so that no two
    overlap (incidents a moment apart, "sample-error #17" beside "killed-by-signal #142")."""
    rows: list[list[tuple[float, float]]] = []  # each row's occupied [start, end] spans
    rows_fit = max(1, min(MAX_LABEL_ROWS, (box.plot_h - 4) // LABEL_ROW_H))
    placed = []
    for position, label in sorted(box.chart.markers, key=lambda marker: marker[0]):
        if not label:
            continue
        x = box.sx(position)
        width = len(label) * LABEL_CHAR_W
        anchor = "end" if x + 4 + width > box.left + box.plot_w else "start"
        start, end = (x - 4 - width, x - 4) if anchor == "end" else (x + 4, x + 4 + width)
        start, end = start - LABEL_GAP_PX / 2, end + LABEL_GAP_PX / 2
        for number in range(rows_fit):
            if number == len(rows):
                rows.append([])
            if all(end <= taken[0] or start >= taken[1] for taken in rows[number]):
                rows[number].append((start, end))
                placed.append((x, anchor, label, number))
                break
    return placed


def _svg_markers(box: Layout) -> list[str]:
    out = []
    for position, label in box.chart.markers:
        x = box.sx(position)
        out.append(
            f'<line x1="{x:.1f}" y1="{box.top}" x2="{x:.1f}" y2="{box.bottom}" '
            f'stroke="{MARKER_COLOR}" stroke-width="1.5" stroke-dasharray="4 3">'
            f"<title>{_e(label)}</title></line>"
        )
    for x, anchor, label, row in label_rows(box):
        dx = -4 if anchor == "end" else 4
        out.append(
            f'<text x="{x + dx:.1f}" y="{box.top + 12 + row * LABEL_ROW_H}" '
            f'text-anchor="{anchor}" class="marker" style="fill:{MARKER_COLOR};{LABEL_HALO}">'
            f"{_e(label)}</text>"
        )
    return out


def svg_chart(chart: Chart, *, width: int = 940, height: int = 240, attributes: str = "") -> str:
    """The chart as one ``<svg>`` element (``attributes`` replace the default ``width="100%"``)."""
    box = layout(chart, width, height)
    size = attributes or 'width="100%"'
    return "".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" {size} viewBox="0 0 {width} {height}" '
            'role="img">',
            *_svg_axes(box),
            *_svg_lines(box),
            *_svg_markers(box),
            "</svg>",
        ]
    )
