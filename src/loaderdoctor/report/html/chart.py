"""The one line chart of every report: memory over time (run), cost along the index (scan),
throughput and memory against workers (tune).

``layout`` decides the geometry (round ticks, pixel positions) once; ``svg_chart`` draws it as
inline SVG, and ``html.tune_plot`` paints the same layout with Pillow for ``--plot x.png``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

MARKER_COLOR = "#d62728"
# Marker labels (11 px system-ui, see report.html's CSS) are laid out from a width estimate wide
# enough for any of its glyphs' averages, in rows under the plot's top edge: a label that would
# touch another moves down a row, and one that fits no row is left to its rule's tooltip.
LABEL_CHAR_W = 6.6
LABEL_ROW_H = 15  # an 11 px label's box, ascent to descent, is about 14 px high
LABEL_GAP_PX = 6
MAX_LABEL_ROWS = 4
END_MARK_R = 5
LABEL_HALO = "paint-order:stroke;stroke:#fff;stroke-width:3px"  # legible across the next rules


@dataclass
class Line:
    label: str
    points: list[tuple[float, float]]
    color: str
    dashed: bool = False
    # A mark where the line ends, with this tooltip: a worker that died there ("died: oom-killed").
    end_mark: str = ""


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
        if line.end_mark:
            out.append(_end_mark(box, line))
    return out


def _end_mark(box: Layout, line: Line) -> str:
    """A ring with a cross at the line's last point, in the line's colour: where it stopped."""
    x, value = line.points[-1]
    return (
        f'<g class="end-mark" transform="translate({box.sx(x):.1f},{box.sy(value):.1f})">'
        f"<title>{_e(line.label)}: {_e(line.end_mark)}</title>"
        f'<circle r="{END_MARK_R}" fill="#fff" stroke="{line.color}" stroke-width="1.5"/>'
        f'<path d="M-3,-3L3,3M-3,3L3,-3" stroke="{line.color}" stroke-width="2"/></g>'
    )


def label_rows(box: Layout) -> list[tuple[float, str, str, int]]:
    """Where each marker's label goes: ``(x, anchor, label, row)``, in rows so that no two
    overlap (incidents a moment apart, "sample-error #17" beside "killed-by-signal #142") and,
    where a row allows, clear of every drawn line (a full /dev/shm runs along the top): rows
    from the top down, then from the bottom up; a row that crosses a line only when no row is
    clear, and a label that fits no row is left to its rule's tooltip."""
    rows_fit = max(1, min(MAX_LABEL_ROWS, (box.plot_h - 4) // LABEL_ROW_H))
    order = list(range(rows_fit))
    order += [-1 - number for number in range(rows_fit) if rows_fit + number + 1 <= _all_rows(box)]
    taken: dict[int, list[tuple[float, float]]] = {row: [] for row in order}
    segments = _segments(box)
    placed = []
    for position, label in sorted(box.chart.markers, key=lambda marker: marker[0]):
        if not label:
            continue
        x = box.sx(position)
        width = len(label) * LABEL_CHAR_W
        anchor = "end" if x + 4 + width > box.left + box.plot_w else "start"
        start, end = (x - 4 - width, x - 4) if anchor == "end" else (x + 4, x + 4 + width)
        start, end = start - LABEL_GAP_PX / 2, end + LABEL_GAP_PX / 2
        free = [row for row in order if all(end <= a or start >= b for a, b in taken[row])]
        clear = [row for row in free if not _crosses(segments, start, end, *_row_span(box, row))]
        chosen = (clear or [row for row in free if row >= 0])[:1]
        for row in chosen:
            taken[row].append((start, end))
            placed.append((x, anchor, label, row))
    return placed


def _all_rows(box: Layout) -> int:
    return max(1, (box.plot_h - 4) // LABEL_ROW_H)


def label_baseline(box: Layout, row: int) -> float:
    """The text baseline of label row ``row``: 0, 1, ... from the top; -1, -2, ... from the
    bottom of the plot."""
    if row >= 0:
        return box.top + 12 + row * LABEL_ROW_H
    return box.bottom - 4 + (row + 1) * LABEL_ROW_H


def _row_span(box: Layout, row: int) -> tuple[float, float]:
    baseline = label_baseline(box, row)
    return baseline - 11, baseline + 3  # an 11 px label: ascent above, descent below


def _segments(box: Layout) -> list[tuple[float, float, float, float]]:
    """Every drawn line as pixel segments (a lone point as a segment of no length)."""
    out: list[tuple[float, float, float, float]] = []
    for line in box.chart.lines:
        pixels = [(box.sx(x), box.sy(value)) for x, value in line.points]
        if len(pixels) == 1:
            pixels = pixels * 2
        out.extend((*a, *b) for a, b in pairwise(pixels))
    return out


def _crosses(
    segments: Sequence[tuple[float, float, float, float]],
    start: float,
    end: float,
    top: float,
    bottom: float,
) -> bool:
    """Whether a segment passes through the box ``[start, end] x [top, bottom]``: its y over
    the box's x range (a straight line's y there lies between its two ends')."""
    for x1, y1, x2, y2 in segments:
        if x2 < x1:
            x1, y1, x2, y2 = x2, y2, x1, y1
        left, right = max(start, x1), min(end, x2)
        if left > right:
            continue
        if x2 == x1:
            low, high = min(y1, y2), max(y1, y2)
        else:
            at_left = y1 + (y2 - y1) * (left - x1) / (x2 - x1)
            at_right = y1 + (y2 - y1) * (right - x1) / (x2 - x1)
            low, high = min(at_left, at_right), max(at_left, at_right)
        if low <= bottom and high >= top:
            return True
    return False


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
            f'<text x="{x + dx:.1f}" y="{label_baseline(box, row):.1f}" '
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
