"""report.html in a real browser: headless Chromium renders it offline, and the PNG shows it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from loaderdoctor.report.html.page import INCIDENT_COLOR, PALETTE, STATUS_COLORS
from loaderdoctor.report.html.run import write_html
from test_run_units import sample_report

SCRIPT = Path(__file__).parents[1] / "scripts" / "screenshot_report.py"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "causes"
MIB = 1024 * 1024


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
    counts = image.getcolors(maxcolors=1 << 20) or []
    colors = {color for _, color in counts}
    assert len(colors) > 50  # text, plots and cards, not a blank or error page
    assert rgb(STATUS_COLORS["crashed"]) in colors  # the status badge and the incident card

    def near(color: str) -> int:
        # Thin lines are anti-aliased: where they fall between pixels, no pixel need carry
        # the exact colour, so count the pixels close to it.
        want = rgb(color)
        return sum(n for n, got in counts if sum((a - b) ** 2 for a, b in zip(got, want)) <= 40**2)

    assert near(INCIDENT_COLOR) >= 20  # incidents marked on the plots
    # the memory chart: the main process (dashed) and its worker, each in its own colour
    assert near(PALETTE[0]) >= 3
    assert near(PALETTE[1]) >= 3


# --- what a reader saw wrong in Chromium, measured in Chromium --------------------
MEASURE = """
<script>
(() => {
  const box = (element) => {
    const r = element.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom};
  };
  // The drawn lines that pass through a label's box, walked a pixel at a time as laid out.
  const linesThrough = (text) => {
    const b = text.getBoundingClientRect();
    const through = [];
    for (const line of text.closest("svg").querySelectorAll("polyline")) {
      const m = line.getScreenCTM();
      const length = line.getTotalLength();
      for (let d = 0; d <= length; d += 1) {
        const p = line.getPointAtLength(d);
        const x = m.a * p.x + m.c * p.y + m.e;
        const y = m.b * p.x + m.d * p.y + m.f;
        if (x >= b.left && x <= b.right && y >= b.top && y <= b.bottom) {
          through.push(line.querySelector("title").textContent);
          break;
        }
      }
    }
    return through;
  };
  const out = {
    svgs: [...document.querySelectorAll("svg")].map(box),
    labels: [...document.querySelectorAll("svg text")]
      .filter((text) => (text.getAttribute("style") || "").includes("fill:%(marker)s"))
      .map((text) => ({text: text.textContent, ...box(text), svg: [...document.querySelectorAll("svg")].indexOf(text.closest("svg"))})),
    fixes: [...document.querySelectorAll("ul.fixes")].map((list) => list.innerText),
    codes: [...document.querySelectorAll("ul.fixes code")].map((code) => code.textContent),
    cards: [...document.querySelectorAll(".card.incident")].map((card) => {
      const stack = card.querySelector("details pre");
      const fixes = card.querySelector("ul.fixes");
      return {
        cause: card.querySelector(".cause").textContent,
        stack: stack ? box(stack) : null,
        fixes: fixes ? box(fixes) : null,
      };
    }),
    marks: [...document.querySelectorAll("g.end-mark")].map((mark) => ({
      title: mark.querySelector("title").textContent,
      svg: [...document.querySelectorAll("svg")].indexOf(mark.closest("svg")),
      ...box(mark),
    })),
    hrefs: [...document.querySelectorAll("a")].map((a) => ({raw: a.getAttribute("href"), resolved: a.href})),
    crossings: [...document.querySelectorAll("svg text")]
      .filter((text) => (text.getAttribute("style") || "").includes("fill:%(marker)s"))
      .map((text) => ({text: text.textContent, lines: linesThrough(text)})),
    died: [...document.querySelectorAll("tr")]
      .filter((row) => getComputedStyle(row.cells[0]).backgroundColor === "rgb(253, 236, 234)")
      .map((row) => row.innerText),
    text: document.body.innerText,
  };
  const pre = document.createElement("pre");
  pre.id = "ld-measure";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def measure(html: Path) -> dict:
    """The page laid out by Chromium: boxes and text as the browser renders them (``--dump-dom``
    after a script that measures), from a copy of the page with that script added."""
    import json
    import re
    import shutil
    import subprocess
    import tempfile

    from loaderdoctor.report.html.chart import MARKER_COLOR

    shot = load_script()
    probe = html.with_name(html.stem + ".measure.html")
    page = html.read_text(encoding="utf-8")
    probe.write_text(page.replace("</body>", MEASURE % {"marker": MARKER_COLOR} + "</body>"))
    profile = tempfile.mkdtemp(prefix="loaderdoctor-chromium-")
    try:
        dom = subprocess.run(
            [shot.find_chromium(), *shot.CHROMIUM_FLAGS, f"--user-data-dir={profile}",
             "--window-size=1000,1400", "--dump-dom", probe.resolve().as_uri()],
            capture_output=True, text=True, timeout=90, check=True, start_new_session=True,
        ).stdout  # fmt: skip
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    found = re.search(r'<pre id="ld-measure">(.*?)</pre>', dom, re.DOTALL)
    assert found is not None, dom[-2000:]
    import html as html_module

    return json.loads(html_module.unescape(found.group(1)))


def close_incidents_report():  # type: ignore[no-untyped-def]
    """Three incidents a moment apart (the labels' worst case), catalog fixes (with their code
    spans), a hang with the stuck worker's stack, and the worker that died in the memory table."""
    import dataclasses

    from loaderdoctor.forensics.catalog import CAUSES

    report = sample_report()
    first = report.incidents[0]

    def at(time_s: float, cause: str, **verdict: object):  # type: ignore[no-untyped-def]
        changed = dataclasses.replace(
            first.diagnosis,
            cause=cause,
            title=CAUSES[cause].title,
            fixes=list(CAUSES[cause].fixes),
            **verdict,  # type: ignore[arg-type]
        )
        return dataclasses.replace(first, diagnosis=changed, time_s=time_s)

    report.incidents = [
        at(2.50, "sample-error", signal=None, indices=[17], pid=4242, python_stack=None),
        at(2.55, "killed-by-signal", signal="SIGKILL", indices=[142], pid=4243, python_stack=None),
        at(
            2.62, "worker-hang", signal=None, indices=[7], pid=4244,
            python_stack='File "data.py", line 12 in __getitem__\n  time.sleep(600)',
        ),
    ]  # fmt: skip
    report.duration_s = 9.0
    # /dev/shm full for the whole run: its line runs along the plot's top edge, where the
    # incidents' labels go first
    assert report.memory is not None
    report.memory.shm_series = [(0.0, 60 * MIB), (1.0, 64 * MIB), (9.0, 64 * MIB)]
    return report


def overlaps(a: dict, b: dict) -> bool:
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and (b["top"] < a["bottom"])
    )


@pytest.mark.slow
def test_run_report_defects_a_reader_saw_are_gone_in_chromium(tmp_path: Path) -> None:
    shot = load_script()
    if shot.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from PIL import Image

    html = write_html(close_incidents_report(), tmp_path)
    seen = measure(html)

    # incident labels: every one drawn, none over another, each inside its chart
    labels = seen["labels"]
    per_chart = {label["svg"] for label in labels}
    assert len(per_chart) == 3  # workers', main processes' and /dev/shm's: each marks them
    for chart in per_chart:
        drawn = sorted(label["text"] for label in labels if label["svg"] == chart)
        assert drawn == ["killed-by-signal #142", "sample-error #17", "worker-hang #7"]
    for number, label in enumerate(labels):
        svg = seen["svgs"][label["svg"]]
        assert svg["left"] <= label["left"] and label["right"] <= svg["right"], label
        for other in labels[number + 1 :]:
            assert not overlaps(label, other), (label, other)

    # and clear of every drawn line (the full /dev/shm's along the top among them)
    assert [label["lines"] for label in seen["crossings"]] == [[]] * len(labels)

    # the dead worker's memory line ends in a mark that says so, on the workers' chart
    (mark,) = seen["marks"]
    assert mark["title"] == "worker pid 4242 (USS): died: sample-error"
    workers_chart = seen["svgs"][mark["svg"]]
    assert mark["svg"] == 0 and overlaps(mark, workers_chart)

    # the docs links are relative to the page and lead to the checkout's pages
    pages = [link for link in seen["hrefs"] if "docs/causes/" in link["raw"]]
    assert len(pages) == 3
    for link in pages:
        assert not link["raw"].startswith(("file:", "/")), link
        target = Path(unquote(urlparse(link["resolved"]).path))
        assert target.is_file() and target.parent == DOCS, link

    # fixes: code spans as code, no literal backticks
    assert seen["fixes"] and not any("`" in fixes for fixes in seen["fixes"])
    assert "dataset[INDEX]" in seen["codes"]

    # the hang's fix says "stack above": the stack is open, and above it
    (hang,) = [card for card in seen["cards"] if card["cause"] == "worker-hang"]
    assert hang["stack"]["bottom"] - hang["stack"]["top"] > 10  # open, not collapsed
    assert hang["stack"]["bottom"] <= hang["fixes"]["top"]
    assert any("stack above" in fixes for fixes in seen["fixes"])

    # the process table marks the worker that died
    assert seen["died"] == ["4242\tworker died: sample-error\t\tfork\t0 B\t-\t-\t0.0–0.0 s"]

    # and the screenshot shows it: the marked row's colour is on the page
    png = shot.screenshot(html, tmp_path / "report.png", width=1000, height=4000, timeout=90)
    colors = {color for _, color in Image.open(png).convert("RGB").getcolors(1 << 20) or []}
    assert (253, 236, 234) in colors


@pytest.mark.slow
def test_32_workers_keep_32_colours_in_chromium(tmp_path: Path) -> None:
    """Each worker's swatch in the legend, as the browser paints it: 32 colours, none twice."""
    shot = load_script()
    if shot.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from PIL import Image

    from test_run_units import worker

    report = sample_report()
    assert report.memory is not None
    report.memory.processes = [worker(5000 + n, [n, n + 2, n + 1]) for n in range(32)]
    html = write_html(report, tmp_path)
    png = shot.screenshot(html, tmp_path / "report.png", width=1000, height=1400, timeout=90)
    colors = {color for _, color in Image.open(png).convert("RGB").getcolors(1 << 20) or []}
    assert {rgb(color) for color in PALETTE} <= colors
    assert len(PALETTE) == 32


@pytest.mark.slow
def test_scan_page_has_no_flat_memory_plot_in_chromium(tmp_path: Path) -> None:
    shot = load_script()
    if shot.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from loaderdoctor.report.html.scan import write_html as write_scan_html
    from test_scan_report import sample_report as sample_scan

    report = sample_scan()
    assert report.profile is not None
    report.profile.peak_bytes = [
        0 if value is not None else None for value in report.profile.peak_bytes
    ]
    seen = measure(write_scan_html(report, tmp_path))
    assert len(seen["svgs"]) == 1  # the time per sample; memory said in words, not a flat line
    assert (
        "No sample added memory its worker could measure (every peak 0 MiB): there is no memory "
        "plot." in seen["text"].splitlines()
    )
