"""The scan report's renderers (text, HTML) and ``loaderdoctor report scan.json``."""

from __future__ import annotations

import io
import json
import math
import os
from pathlib import Path

import pytest

from conftest import run_python
from loaderdoctor.report.html.scan import bad_markers, format_html, profile_segments, write_html
from loaderdoctor.report.scan import format_settings, format_summary, print_text
from loaderdoctor.scan.model import (
    BadSample,
    HungrySample,
    Outlier,
    Profile,
    ScanReport,
    SlowSample,
)

MiB = 1024 * 1024


def sample_report() -> ScanReport:
    """A scan of 1000 samples profiled in buckets of 10: three bad, one outlier."""
    seconds: list[float | None] = [0.004 + 0.002 * math.sin(b / 7) for b in range(100)]
    peak: list[int | None] = [(20 + (b % 13)) * MiB for b in range(100)]
    seconds[42] = peak[42] = None  # a bucket where every sample failed
    seconds[77] = 0.09
    peak[61] = 310 * MiB + MiB // 2
    peak[77] = 45 * MiB
    return ScanReport(
        spec="train.py:dataset",
        total=1000,
        scanned=996,
        bad=[
            BadSample(
                420,
                "sample-error",
                "/data/img_0420.jpg",
                "OSError: image file is truncated <script>alert(1)</script>",
                ["worker 1 raised OSError", "PIL/ImageFile.py line 249"],
            ),
            BadSample(421, "native-crash", None, "The worker crashed in native code (SIGSEGV)"),
            BadSample(
                613, "oom-killed", "/data/pano & <big>.png", "Killed by the OOM killer", ["e"]
            ),
        ],
        outliers=[Outlier(5, "Tensor[float32](1, 4)", "Tensor[float32](3, 4)", "/data/g.png")],
        slowest=[SlowSample(775, 0.09, "/data/img_0775.jpg"), SlowSample(3, 0.0061, None)],
        seconds=12.5,
        num_workers=4,
        structure="Tensor[float32](3, 4)",
        hungriest=[
            HungrySample(612, 310 * MiB + MiB // 2, None),
            HungrySample(775, 45 * MiB, "/data/img_0775.jpg"),
        ],
        profile=Profile(step=10, seconds=seconds, peak_bytes=peak),
        timeout=60.0,
        mem_limit_bytes=512 * MiB,
        mem_cap="cgroup v1",
        ranks=2,
        resumed=200,
    )


def schema_1_json() -> dict:
    """What ``loaderdoctor scan --json`` printed before schema 2: no memory, profile or settings."""
    return {
        "spec": "data.py:train",
        "total": 10,
        "scanned": 9,
        "bad": [{"index": 3, "cause": "sample-error", "file": None, "message": "ValueError: x"}],
        "outliers": [],
        "slowest": [{"index": 1, "seconds": 0.0125, "file": "/d/1.jpg"}],
        "seconds": 2.0,
        "num_workers": 2,
        "structure": "Tensor[float32](3, 4)",
        "schema": 1,
        "throughput": 5.0,
    }


# --- unit: data in, exact output --------------------------------------------------------------
def test_summary_keeps_its_first_line_and_adds_the_settings() -> None:
    assert format_summary(sample_report()).splitlines() == [
        "scanned 1000 samples: 200 before the interruption (from the checkpoint), 800 now in "
        "12.5 s (64.0 samples/s, 4 workers): 3 bad, 1 outliers",
        "settings: timeout 60 s, memory cap 512 MiB per worker (cgroup v1), 2 ranks, "
        "200 samples from checkpoint",
    ]


@pytest.mark.parametrize(
    ("fields", "settings"),
    [
        ({}, ""),
        ({"timeout": 1.5}, "timeout 1.5 s"),
        (
            {"mem_cap": "not enforced: no cgroup v1 and not root"},
            "no memory cap (not enforced: no cgroup v1 and not root)",
        ),
        (
            {"mem_limit_bytes": 1536 * MiB, "mem_cap": "RLIMIT_AS"},
            "memory cap 1.5 GiB per worker (RLIMIT_AS)",
        ),
        ({"ranks": 1, "resumed": 0, "mem_limit_bytes": MiB}, "memory cap 1 MiB per worker"),
    ],
)
def test_settings_name_only_what_was_set(fields: dict, settings: str) -> None:
    report = ScanReport("d.py:x", 1, 1, [], [], [], 1.0, 1, **fields)
    assert format_settings(report) == settings
    assert format_summary(report).endswith(f"\nsettings: {settings}" if settings else "outliers")


def test_text_has_the_memory_hungry_table_after_the_slowest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # not a terminal: the tables take their natural width
    report = sample_report()
    report.bad, report.outliers = report.bad[:1], []
    out = io.StringIO()
    print_text(report, out)
    assert out.getvalue() == (
        "scanned 1000 samples: 200 before the interruption (from the checkpoint), 800 now in "
        "12.5 s (64.0 samples/s, 4 workers): 1 bad, 0 outliers\n"
        "settings: timeout 60 s, memory cap 512 MiB per worker (cgroup v1), 2 ranks, 200 samples "
        "from checkpoint\n"
        "bad samples\n"
        "┏━━━━━━━┳━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓\n"
        "┃ index ┃ cause        ┃ file               ┃ message                                                    ┃\n"
        "┡━━━━━━━╇━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩\n"
        "│ 420   │ sample-error │ /data/img_0420.jpg │ OSError: image file is truncated <script>alert(1)</script> │\n"
        "└───────┴──────────────┴────────────────────┴────────────────────────────────────────────────────────────┘\n"
        "slowest samples\n"
        "┏━━━━━━━┳━━━━━━┳━━━━━━━━━━━━━━━━━━━━┓\n"
        "┃ index ┃ ms   ┃ file               ┃\n"
        "┡━━━━━━━╇━━━━━━╇━━━━━━━━━━━━━━━━━━━━┩\n"
        "│ 775   │ 90.0 │ /data/img_0775.jpg │\n"
        "│ 3     │ 6.1  │ -                  │\n"
        "└───────┴──────┴────────────────────┘\n"
        "memory-hungry samples\n"
        "┏━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━┓\n"
        "┃ index ┃ peak MiB ┃ file               ┃\n"
        "┡━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━┩\n"
        "│ 612   │ 310.5    │ -                  │\n"
        "│ 775   │ 45.0     │ /data/img_0775.jpg │\n"
        "└───────┴──────────┴────────────────────┘\n"
    )


def test_html_has_every_section_and_both_plots() -> None:
    page = format_html(sample_report())
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
    for section in (
        "<code>train.py:dataset</code>",
        ">3 bad</span>",  # the badge
        "settings: timeout 60 s, memory cap 512 MiB per worker (cgroup v1), 2 ranks",
        "<h2>Bad samples</h2>",
        "<h2>Outliers (default_collate expects <code>Tensor[float32](3, 4)</code>)</h2>",
        "<code>Tensor[float32](1, 4)</code>",
        "<summary>2 line(s)</summary>",  # evidence, collapsed
        "<li>PIL/ImageFile.py line 249</li>",
        "<h2>Slowest samples</h2>",
        "<h2>Memory-hungry samples</h2>",
        '<td class="num">310.5</td>',
        "Time per sample (ms, worst of each 10 samples) against index",
    ):
        assert section in page, section
    assert page.count("<svg") == 2  # time and memory against the index
    assert "#420 sample-error +1" in page  # 420 and 421 share one rule on the time plot
    assert ">100 ms</text>" in page  # the time axis reaches past the 90 ms bucket
    assert ">1000</text>" not in page and ">800</text>" in page  # an index axis, not seconds
    for outside in ("http://", "https://", "<script", "<link", "<img"):
        assert outside not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_html_escapes_everything_from_the_report() -> None:
    page = format_html(sample_report())
    assert "<script>" not in page
    assert "truncated &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "/data/pano &amp; &lt;big&gt;.png" in page


def test_bad_samples_link_their_cause_page_relative_to_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout's page by a path relative to the report's folder (never a file:// URL into
    the checkout); with $LOADERDOCTOR_DOCS_URL, that site's page; unlinked where neither is."""
    monkeypatch.delenv("LOADERDOCTOR_DOCS_URL", raising=False)
    reports = tmp_path / "reports"
    reports.mkdir()
    page = format_html(sample_report(), reports)
    docs = Path(__file__).resolve().parents[1] / "docs" / "causes" / "sample-error.md"
    relative = Path(os.path.relpath(docs, reports.resolve())).as_posix()
    assert f'<a href="{relative}"><span class="cause">sample-error</span></a>' in page
    assert (reports / relative).resolve() == docs
    assert "file://" not in page
    assert '<span class="cause">oom-killed</span>' in page
    assert '<a href="' not in format_html(sample_report())  # no folder: no relative link
    monkeypatch.setenv("LOADERDOCTOR_DOCS_URL", "https://example.org/loaderdoctor/blob/main/")
    assert (
        '<a href="https://example.org/loaderdoctor/blob/main/docs/causes/sample-error.md">'
        '<span class="cause">sample-error</span></a>'
    ) in format_html(sample_report())


def test_an_all_bad_bucket_breaks_the_line() -> None:
    lines = profile_segments([1.0, None, 2.0, 3.0], 10, "t", "#000")
    assert [line.points for line in lines] == [[(0.0, 1.0)], [(20.0, 2.0), (30.0, 3.0)]]
    assert profile_segments([None, None], 1, "t", "#000") == []


def test_bad_markers_merge_neighbours_and_label_only_where_there_is_room() -> None:
    report = sample_report()
    report.bad.append(BadSample(640, "sample-error", None, "m"))
    assert bad_markers(report, 999.0) == [
        (420.0, "#420 sample-error +1"),
        (613.0, "#613 oom-killed"),
        (640.0, ""),  # too close to the last label to be readable
    ]


def test_schema_1_json_renders_without_the_new_fields() -> None:
    report = ScanReport.from_dict(json.loads(json.dumps(schema_1_json())))
    assert report.hungriest == [] and report.profile is None and report.timeout is None
    out = io.StringIO()
    print_text(report, out)
    text = out.getvalue()
    assert text.startswith(
        "scanned 10 samples in 2.0 s (5.0 samples/s, 2 workers): 1 bad, 0 outliers\n"
    )
    assert "settings:" not in text and "memory-hungry" not in text
    page = format_html(report)
    assert "<svg" not in page and "No per-sample profile in this report" in page
    assert "settings:" not in page and "Memory-hungry" not in page
    assert format_html(ScanReport.from_dict(report.to_dict())) == page


def test_a_clean_report_says_so() -> None:
    report = ScanReport("d.py:x", 3, 3, [], [], [], 0.0, 1)
    page = format_html(report)
    assert ">clean</span>" in page and "None: every sample loaded." in page
    assert "<h2>Outliers" not in page


def test_write_html_names_the_file_in_a_folder(tmp_path: Path) -> None:
    assert write_html(sample_report(), tmp_path) == tmp_path / "scan.html"
    written = write_html(sample_report(), str(tmp_path / "x.html"))  # as --html PATH gives it
    assert written == tmp_path / "x.html" and written.read_text().startswith("<!DOCTYPE")


# --- integration: the real CLI in a subprocess ---------------------------------------------------
@pytest.mark.slow
def test_cli_report_rerenders_a_scan_json(tmp_path: Path) -> None:
    path = tmp_path / "scan.json"
    path.write_text(json.dumps(sample_report().to_dict()))
    result = run_python(["-m", "loaderdoctor", "report", str(path)], timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("scanned 1000 samples: 200 before the interruption")
    assert "420" in result.stdout and "memory-hungry samples" in result.stdout
    html = tmp_path / "scan.html"
    assert f"report: {html}" in result.stdout
    assert "<h2>Bad samples</h2>" in html.read_text()


@pytest.mark.slow
def test_cli_report_of_a_clean_schema_1_scan_prints_json_and_exits_0(tmp_path: Path) -> None:
    data = schema_1_json()
    data["bad"] = []
    path = tmp_path / "clean.json"
    path.write_text(json.dumps(data))
    result = run_python(["-m", "loaderdoctor", "report", str(path), "--json", "--no-html"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["bad"] == []
    assert not (tmp_path / "scan.html").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"bad": [], "outl', "cannot read "),
        ('{"bad": [], "outliers": [], "schema": 9}', "is not a loaderdoctor scan report"),
        ('{"neither": 1}', "is not a loaderdoctor run report"),
    ],
)
def test_cli_report_of_a_bad_file_is_one_line_and_exit_2(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "scan.json"
    path.write_text(content)
    result = run_python(["-m", "loaderdoctor", "report", str(path)], timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loaderdoctor report: error: ")
    assert message in lines[0]
    assert result.stdout == "" and not (tmp_path / "scan.html").exists()


@pytest.mark.slow
def test_scan_html_renders_in_headless_chromium(tmp_path: Path) -> None:
    from test_report_html_browser import load_script, rgb

    shot = load_script()
    if shot.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from PIL import Image

    from loaderdoctor.report.html.page import INCIDENT_COLOR
    from loaderdoctor.report.html.scan import MEMORY_COLOR, TIME_COLOR

    html = write_html(sample_report(), tmp_path)
    png = shot.screenshot(html, tmp_path / "scan.png", width=1000, height=1600, timeout=90)
    colors = {color for _, color in Image.open(png).convert("RGB").getcolors(1 << 20) or []}
    assert len(colors) > 50  # text, tables and plots, not a blank or error page
    for drawn in (INCIDENT_COLOR, TIME_COLOR, MEMORY_COLOR):  # bad-sample rules, both lines
        assert rgb(drawn) in colors, drawn


@pytest.mark.slow
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"bad": [5]}, "report.bad[0]: expected an object, got 5"),
        ({"seconds": "2"}, 'report.seconds: expected a number, got "2"'),
        ({"slowest": [{"index": 1, "seconds": 0.1}]}, "report.slowest[0]: no 'file'"),
    ],
)
def test_a_damaged_scan_report_is_one_line_naming_the_field(
    tmp_path: Path, edit: dict[str, object], message: str
) -> None:
    document = {
        "schema": 2, "spec": "d.py:x", "total": 3, "scanned": 3, "bad": [], "outliers": [],
        "slowest": [], "seconds": 1.0, "num_workers": 2, **edit,
    }  # fmt: skip
    path = tmp_path / "scan.json"
    path.write_text(json.dumps(document))
    result = run_python(["-m", "loaderdoctor", "report", str(path)], timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"loaderdoctor report: error: {path} is not a loaderdoctor scan report: {message}"
    ]
