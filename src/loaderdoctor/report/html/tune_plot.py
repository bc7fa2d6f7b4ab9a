"""``--plot PATH``: the tune charts as ``.html`` or ``.svg`` (inline SVG) or ``.png`` (Pillow).

The PNG paints ``html.chart``'s layout (the same ticks and positions as the SVG) with Pillow.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from loaderdoctor.atomic import write_atomically
from loaderdoctor.report.html.chart import Chart, layout, x_label, y_label
from loaderdoctor.report.html.tune import charts, format_html, format_svg
from loaderdoctor.report.output import printable
from loaderdoctor.tune.model import TuneReport

PLOT_SUFFIXES = (".html", ".svg", ".png")


def format_png(report: TuneReport) -> bytes:
    buffer = io.BytesIO()
    render_png(report).save(buffer, format="PNG")
    return buffer.getvalue()


def write_plot(report: TuneReport, path: str | os.PathLike[str]) -> Path:
    """Write the plot in the format the suffix names, atomically; ValueError for another suffix."""
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix == ".html":
        return write_atomically(target, format_html(report))
    if suffix == ".svg":
        return write_atomically(target, format_svg(report))
    if suffix == ".png":
        return write_atomically(target, format_png(report))
    raise ValueError(f"--plot takes a {', '.join(PLOT_SUFFIXES)} file, not {target.name}")


def _hex(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def render_png(report: TuneReport, width: int = 940, panel_height: int = 280) -> Any:
    """Both charts, one above the other, drawn with Pillow (a dependency already)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, 2 * panel_height), "white")
    draw = ImageDraw.Draw(image)
    for index, chart in enumerate(charts(report)):
        _panel(draw, chart, 0, index * panel_height, width, panel_height)
    return image


def _font() -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=12)  # Pillow >= 10.1 with FreeType
    except TypeError:
        return ImageFont.load_default()  # the small bitmap font


def _text(
    draw: Any,
    xy: tuple[float, float],
    label: str,
    font: Any,
    fill: tuple[int, int, int],
    align: str = "left",
) -> None:
    # positioned by hand: ``anchor=`` needs a FreeType font, the bitmap fallback has none
    x, y = xy
    length = draw.textlength(label, font=font)
    x -= length if align == "right" else length / 2 if align == "center" else 0
    draw.text((x, y), label, fill=fill, font=font)


def _panel(draw: Any, chart: Chart, x0: int, y0: int, width: int, height: int) -> None:
    font = _font()
    box = layout(chart, width, height)

    def at(x: float, y: float) -> tuple[float, float]:
        return x0 + x, y0 + y

    grey, text = (228, 231, 236), (68, 68, 68)
    draw.text(at(box.left, 6), printable(chart.title)[0], fill=(29, 35, 48), font=font)
    for tick in box.y_ticks:
        y = box.sy(tick * chart.y_unit)
        draw.line([at(box.left, y), at(box.left + box.plot_w, y)], fill=grey)
        _text(draw, at(box.left - 6, y - 6), y_label(chart, tick), font, text, align="right")
    for tick in box.x_ticks:
        _text(draw, at(box.sx(tick), box.bottom + 4), x_label(chart, tick), font, text, "center")
    _text(draw, at(box.left + box.plot_w / 2, height - 20), chart.x_label, font, text, "center")
    draw.rectangle(
        [at(box.left, box.top), at(box.left + box.plot_w, box.bottom)], outline=(201, 206, 214)
    )
    for number, line in enumerate(chart.lines):
        color = _hex(line.color)
        points = [at(box.sx(x), box.sy(v)) for x, v in line.points]
        if len(points) > 1:
            draw.line(points, fill=color, width=1 if line.dashed else 2)
        if chart.dots and not line.dashed:
            for x, y in points:
                draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=color)
        legend_x, legend_y = at(box.left + box.plot_w - 190, box.top + 6 + 15 * number)
        draw.line([(legend_x, legend_y + 6), (legend_x + 14, legend_y + 6)], fill=color, width=3)
        draw.text((legend_x + 20, legend_y), printable(line.label)[0], fill=text, font=font)
