"""``--plot PATH``: the tune charts as ``.html`` or ``.svg`` (inline SVG) or ``.png`` (Pillow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loaderdoctor.report.tune_html import Chart, chart_axes, charts, format_html, format_svg
from loaderdoctor.tune.model import TuneReport

PLOT_SUFFIXES = (".html", ".svg", ".png")


def write_plot(report: TuneReport, path: str) -> Path:
    """Write the plot in the format the suffix names; ValueError for any other suffix."""
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix == ".html":
        target.write_text(format_html(report), encoding="utf-8")
    elif suffix == ".svg":
        target.write_text(format_svg(report), encoding="utf-8")
    elif suffix == ".png":
        render_png(report).save(target, format="PNG")
    else:
        raise ValueError(f"--plot takes a {', '.join(PLOT_SUFFIXES)} file, not {target.name}")
    return target


def _hex(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def render_png(report: TuneReport, width: int = 940, panel_height: int = 280) -> Any:
    """Both charts, one above the other, drawn with Pillow (a dependency already)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, 2 * panel_height), "white")
    draw = ImageDraw.Draw(image)
    for index, chart in enumerate(charts(report)):
        _panel(draw, chart, report.max_workers, 0, index * panel_height, width, panel_height)
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


def _panel(
    draw: Any, chart: Chart, x_max: float, x0: int, y0: int, width: int, height: int
) -> None:
    font = _font()
    left, right, top, bottom = 72, 14, 28, 42
    plot_w, plot_h = width - left - right, height - top - bottom
    y_step, y_max, x_max, x_step = chart_axes(chart, x_max)

    def sx(x: float) -> float:
        return x0 + left + plot_w * min(max(x / x_max, 0.0), 1.0)

    def sy(value: float) -> float:
        return y0 + top + plot_h * (1 - min(value / chart.y_unit / y_max, 1.0))

    grey, text = (228, 231, 236), (68, 68, 68)
    draw.text((x0 + left, y0 + 6), chart.title, fill=(29, 35, 48), font=font)
    tick = 0.0
    while tick <= y_max + 1e-9:
        y = sy(tick * chart.y_unit)
        draw.line([(x0 + left, y), (x0 + width - right, y)], fill=grey)
        label = f"{tick:g} {chart.y_suffix}".strip()
        _text(draw, (x0 + left - 6, y - 6), label, font, text, align="right")
        tick += y_step
    tick = 0.0
    while tick <= x_max + 1e-9:
        x = sx(tick)
        _text(draw, (x, y0 + top + plot_h + 4), f"{tick:g}", font, text, align="center")
        tick += x_step
    _text(draw, (x0 + left + plot_w / 2, y0 + height - 20), "num_workers", font, text, "center")
    draw.rectangle(
        [x0 + left, y0 + top, x0 + left + plot_w, y0 + top + plot_h], outline=(201, 206, 214)
    )
    for number, line in enumerate(chart.lines):
        color = _hex(line.color)
        points = [(sx(x), sy(v)) for x, v in line.points]
        if len(points) > 1:
            draw.line(points, fill=color, width=1 if line.dashed else 2)
        if not line.dashed:
            for x, y in points:
                draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=color)
        legend_y = y0 + top + 6 + 15 * number
        legend_x = x0 + width - right - 190
        draw.line([(legend_x, legend_y + 6), (legend_x + 14, legend_y + 6)], fill=color, width=3)
        draw.text((legend_x + 20, legend_y), line.label, fill=text, font=font)
