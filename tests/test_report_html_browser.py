"""report.html in a real browser: headless Chromium renders it offline, and the PNG shows it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from loaderdoctor.report.html import INCIDENT_COLOR, PALETTE, STATUS_COLORS
from loaderdoctor.report.run_html import write_html
from test_run_units import sample_report

SCRIPT = Path(__file__).parents[1] / "scripts" / "screenshot_report.py"


def load_script():
    spec = importlib.util.spec_from_file_location("screenshot_report", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rgb(color: str) -> tuple[int, int, int]:
    return tuple(int(color[i : i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    shot = load_script()
    if shot.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from PIL import Image

    html = write_html(sample_report(), tmp_path)
    png = shot.screenshot(html, tmp_path / "report.png", width=1000, height=1400, timeout=90)
    image = Image.open(png).convert("RGB")
    assert image.size == (1000, 1400)
    colors = {color for _, color in image.getcolors(maxcolors=1 << 20) or []}
    assert len(colors) > 50  # text, plots and cards, not a blank or error page
    assert rgb(STATUS_COLORS["crashed"]) in colors  # the status badge and the incident card
    assert rgb(INCIDENT_COLOR) in colors  # incidents marked on the plots
    # the memory chart: the main process (dashed) and its worker, each in its own colour
    assert {rgb(PALETTE[0]), rgb(PALETTE[1])} <= colors
