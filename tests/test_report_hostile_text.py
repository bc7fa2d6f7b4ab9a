"""Every renderer takes any text a dataset can hold: bytes that are not UTF-8 (file
names, exception messages), markup of rich and HTML, control characters. Pages and terminals get
text they can encode, the report says what was escaped, and a failed write keeps the old file."""

from __future__ import annotations

import dataclasses
import html
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_python
from loaderdoctor.atomic import write_atomically
from loaderdoctor.report import demo, env, run_text, scan, tune
from loaderdoctor.report.html import run as run_html
from loaderdoctor.report.html import scan as scan_html
from loaderdoctor.report.html import tune as tune_html
from loaderdoctor.report.output import UNDECODABLE_NOTE, EscapingStream, has_undecodable, printable
from test_demo import _fixed_report as demo_report
from test_env_report import fixed_report as env_report
from test_run_units import sample_report as run_report
from test_scan_report import sample_report as scan_report
from test_tune import sample_report as tune_report

# Fields whose values are a closed set (a status, a role): renderers look them up, and data from
# anywhere but loaderdoctor itself never fills them.
CLOSED_FIELDS = {"status", "role", "phase", "unit", "schema"}

HOSTILE_WORDS = ["[bold]", "[/x]", "[link=file:///]x", "<script>", "&amp;", ":smile:", "\x1b[31m"]
hostile_text = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=30),  # surrogates included
    st.binary(max_size=30).map(os.fsdecode),  # what os.listdir returns for a Linux file name
    st.lists(st.sampled_from(HOSTILE_WORDS), max_size=4).map("".join),
)
WIDE = {"COLUMNS": "250"}  # rich folds long cells at the terminal's width
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def taint(value: Any, text: str) -> Any:
    """``value`` with ``text`` appended to every free-text string in it, however deep."""
    if isinstance(value, str):
        return value + text
    if isinstance(value, list):
        return [taint(item, text) for item in value]
    if isinstance(value, tuple):
        return tuple(taint(item, text) for item in value)
    if isinstance(value, dict):
        return {key: taint(item, text) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            field.name: taint(getattr(value, field.name), text)
            for field in dataclasses.fields(value)
            if field.init and field.name not in CLOSED_FIELDS
        }
        return dataclasses.replace(value, **changes)
    return value


def assert_encodable(output: str, text: str) -> None:
    output.encode("utf-8")  # strict: what a page on disk or a UTF-8 terminal needs
    assert (UNDECODABLE_NOTE in output) == has_undecodable(text)


def reports(text: str) -> dict[str, Any]:
    return {
        "run": taint(run_report(), text),
        "scan": taint(scan_report(), text),
        "tune": taint(tune_report(), text),
        "env": taint(env_report(), text),
        "demo": taint(demo_report(), text),
    }


# --- unit: the escaping itself ----------------------------------------------------------------
def test_printable_spells_undecodable_bytes_as_hex_escapes() -> None:
    name = os.fsdecode(b"img_\xff\xfe.jpg")
    assert printable(name) == ("img_\\xff\\xfe.jpg", 2)
    assert printable("lone \ud800 high") == ("lone \\ud800 high", 1)
    assert printable("caf\u00e9 <ok>") == ("caf\u00e9 <ok>", 0)


def test_escaping_stream_counts_what_it_escaped() -> None:
    target = io.StringIO()
    stream = EscapingStream(target)
    stream.write(os.fsdecode(b"a\xffb"))
    stream.write("plain")
    assert (target.getvalue(), stream.escaped) == ("a\\xffbplain", 1)


# --- property: any text through every renderer -------------------------------------------------
@SETTINGS
@given(text=hostile_text)
def test_html_pages_take_any_text(text: str) -> None:
    data = reports(text)
    pages = {
        "run": run_html.format_html(data["run"]),
        "scan": scan_html.format_html(data["scan"]),
        "tune": tune_html.format_html(data["tune"]),
        "tune.svg": tune_html.format_svg(data["tune"]),
    }
    shown = html.escape(printable(text)[0], quote=True)
    for name, page in pages.items():
        assert "<script>" not in page, name
        if name == "tune.svg":  # its text is loaderdoctor's own: labels and numbers
            page.encode("utf-8")
            continue
        assert_encodable(page, text)
        assert page.startswith("<!DOCTYPE html>"), name
        assert page.endswith("</main></body></html>\n"), name
    # the user's text is there, escaped, where the user will look for it
    assert f"<code>{html.escape(printable('/data/img_0420.jpg' + text)[0])}</code>" in pages["scan"]
    assert shown in pages["run"]


@SETTINGS
@given(text=hostile_text)
def test_terminal_renderers_take_any_text(text: str) -> None:
    data = reports(text)
    outputs = {
        "run": run_text.format_text(data["run"], width=100),
        "scan": scan.format_text(data["scan"]),
        "tune": tune.format_text(data["tune"]),
        "env": env.format_text(data["env"]),
        "demo": demo.format_text(data["demo"]),
    }
    for output in outputs.values():
        assert_encodable(output, text)


@SETTINGS
@given(text=hostile_text)
def test_json_renderers_round_trip_any_text(text: str) -> None:
    data = reports(text)
    for name, format_json in (
        ("run", run_text.format_json),
        ("scan", scan.format_json),
        ("tune", tune.format_json),
        ("env", env.format_json),
        ("demo", demo.format_json),
    ):
        output = format_json(data[name])
        output.encode("ascii")  # every byte of the name survives, as \\udcNN
        loaded = json.loads(output)
        if name == "tune":
            assert loaded.pop("snippet") == tune.format_snippet(data[name])
        assert loaded == json.loads(json.dumps(data[name].to_dict(), default=repr))


def test_file_names_with_markup_are_shown_as_written() -> None:
    report = taint(scan_report(), " [bold]x[/bold] [/x]")
    text = scan.format_text(report, width=200)
    assert "/data/img_0420.jpg [bold]x[/bold] [/x]" in text


def test_terminal_says_once_that_it_escaped_bytes() -> None:
    report = taint(run_report(), os.fsdecode(b"\xff"))
    lines = run_text.format_text(report, width=200).splitlines()
    assert lines[-1] == f"note: {UNDECODABLE_NOTE}"
    assert sum(UNDECODABLE_NOTE in line for line in lines) == 1


# --- atomic writes ------------------------------------------------------------------------------
def test_a_failed_write_keeps_the_previous_file(tmp_path: Path, monkeypatch) -> None:
    page = tmp_path / "report.html"
    page.write_text("<old good page>")

    def no_rename(source: str, target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(OSError, match="No space left"):
        run_html.write_html(run_report(), tmp_path)
    assert page.read_text() == "<old good page>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # no temporary left


def test_a_rendering_failure_keeps_the_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "scan.html"
    target.write_text("<old good page>")
    with pytest.raises(UnicodeEncodeError):
        write_atomically(target, "\udcff")  # text that was not made printable: refused whole
    assert target.read_text() == "<old good page>"
    assert [p.name for p in tmp_path.iterdir()] == ["scan.html"]


def test_atomic_write_keeps_the_usual_permissions(tmp_path: Path) -> None:
    written = write_atomically(tmp_path / "a.html", "x")
    umask = os.umask(0o022)
    os.umask(umask)
    assert written.stat().st_mode & 0o777 == 0o666 & ~umask


# --- integration: a real non-UTF-8 file name on disk --------------------------------------------
def _image_folder(root: Path) -> bytes:
    from PIL import Image

    for number in range(3):
        Image.new("RGB", (8, 8), (number * 60, 0, 0)).save(root / f"ok_{number}.png")
    bad = b"bad_\xff\xfe[bold].png"
    (Path(os.fsdecode(bytes(root))) / os.fsdecode(bad)).write_bytes(b"not a png")
    return bad


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="Linux file names are bytes")
def test_scan_html_and_report_with_a_non_utf8_file_name(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    _image_folder(images)
    page = tmp_path / "scan.html"
    page.write_text("<old good page>")
    common = ["--num-workers", "1", "--out", str(tmp_path / "q.json"), "--timeout", "60"]
    result = run_python(
        ["-m", "loaderdoctor", "scan", str(images), "--html", str(page), *common],
        timeout=120,
        env=WIDE,
    )
    assert result.returncode == 1, result.stderr  # findings: one bad sample
    assert "internal error" not in result.stderr
    assert "bad_\\xff\\xfe[bold].png" in result.stdout  # the table names it, markup and all
    assert result.stdout.splitlines()[-1] == f"note: {UNDECODABLE_NOTE}"
    text = page.read_text(encoding="utf-8")
    assert "<code>" + str(images) + "/bad_\\xff\\xfe[bold].png</code>" in text
    assert f'<p class="muted">Note: {UNDECODABLE_NOTE}.</p>' in text

    scan_json = tmp_path / "scan.json"
    result = run_python(
        ["-m", "loaderdoctor", "scan", str(images), "--json", *common, "--checkpoint",
         str(tmp_path / "c.json")],
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    scan_json.write_text(result.stdout)
    assert json.loads(result.stdout)["bad"][0]["file"] == os.fsdecode(
        bytes(images) + b"/bad_\xff\xfe[bold].png"
    )  # the JSON keeps the real name, bytes and all
    page.unlink()
    result = run_python(["-m", "loaderdoctor", "report", str(scan_json)], timeout=60, env=WIDE)
    assert result.returncode == 1, result.stderr
    assert "internal error" not in result.stderr
    assert f"report: {page}" in result.stdout
    assert "bad_\\xff\\xfe[bold].png" in page.read_text(encoding="utf-8")


@pytest.mark.slow
def test_report_rerenders_a_run_report_naming_a_non_utf8_file(tmp_path: Path) -> None:
    from loaderdoctor.runner.core import write_report

    name = os.fsdecode(b"/data/\xffsample.jpg")
    report = run_report()
    report.incidents[0].diagnosis.sample_file = name
    report.incidents[0].evidence.insert(0, f"ValueError: no image in {name}")
    write_report(report, tmp_path)
    (tmp_path / "report.html").write_text("<old good page>")
    result = run_python(["-m", "loaderdoctor", "report", str(tmp_path)], timeout=60, env=WIDE)
    assert result.returncode == 1, result.stderr
    assert "internal error" not in result.stderr
    assert "    - ValueError: no image in /data/\\xffsample.jpg" in result.stdout.splitlines()
    assert result.stdout.splitlines()[-1] == f"note: {UNDECODABLE_NOTE}"
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<code>/data/\\xffsample.jpg</code>" in page
    result = run_python(["-m", "loaderdoctor", "report", str(tmp_path), "--json"], timeout=60)
    assert json.loads(result.stdout)["incidents"][0]["sample_file"] == name


NAMED_DATASET = '''
import os

import torch

from loaderdoctor import DataLoader


class Named(torch.utils.data.Dataset):
    """Files named in bytes that are not UTF-8; sample 5 cannot be read."""

    def __init__(self):
        self.samples = [(os.fsdecode(b"/data/img_%d_\\xff.jpg" % i), 0) for i in range(16)]

    def __len__(self):
        return 16

    def __getitem__(self, index):
        if index == 5:
            raise OSError(f"cannot identify image file {self.samples[index][0]}")
        return torch.zeros(2)


if __name__ == "__main__":
    for _ in DataLoader(Named(), batch_size=4, num_workers=1):
        pass
'''


@pytest.mark.slow
def test_run_reports_a_sample_error_naming_a_non_utf8_file(tmp_path: Path) -> None:
    script = tmp_path / "named.py"
    script.write_text(NAMED_DATASET)
    report_dir = tmp_path / "report"
    report_dir.mkdir()
    (report_dir / "report.html").write_text("<old good page>")
    result = run_python(
        ["-m", "loaderdoctor", "run", "--report-dir", str(report_dir), "--", sys.executable,
         str(script)],
        timeout=120,
        env=WIDE,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr  # the script's own: the error ends it
    assert "internal error" not in result.stderr
    assert result.stderr.splitlines()[-1] == f"note: {UNDECODABLE_NOTE}"
    data = json.loads((report_dir / "report.json").read_text())
    (incident,) = data["incidents"]
    assert incident["sample_file"] == os.fsdecode(b"/data/img_5_\xff.jpg")  # bytes and all
    page = (report_dir / "report.html").read_text(encoding="utf-8")
    assert "file <code>/data/img_5_\\xff.jpg</code>" in page
    assert f'<p class="muted">Note: {UNDECODABLE_NOTE}.</p>' in page
