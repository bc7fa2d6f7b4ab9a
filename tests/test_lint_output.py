"""Severities, --platform, --fail-on, info findings, and the SARIF 2.1.0 log."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from loaderdoctor.lint import RULES, LintFinding, LintReport, check_paths, check_source
from loaderdoctor.report.lint import format_text, sarif_log

CORPUS = Path(__file__).parent / "lint_corpus"
UNGUARDED = textwrap.dedent(
    """\
    from torch.utils.data import DataLoader
    for batch in DataLoader(ds, num_workers=2, collate_fn=lambda b: b):
        pass
    """
)


def lint(*arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loaderdoctor", "lint", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    ("platform", "severity", "where"),
    [
        ("all", "error", "on Windows and macOS (spawn) and Linux from Python 3.14 (forkserver)"),
        ("windows", "error", "on Windows (spawn)"),
        ("macos", "error", "on macOS (spawn)"),
        ("linux", "warning", "on Linux with Python 3.14+ (forkserver default) or a spawn context"),
    ],
)
def test_spawn_only_rules_follow_the_platform(platform: str, severity: str, where: str) -> None:
    findings = check_source(UNGUARDED, "t.py", platform=platform)
    assert [(f.code, f.severity) for f in findings] == [("LD101", severity), ("LD102", severity)]
    assert (
        findings[1].message == f"collate_fn is a lambda: pickle cannot send it to "
        f"spawn/forkserver workers, so the first epoch fails {where}"
    )


def test_explicit_spawn_context_is_an_error_on_linux_too() -> None:
    source = UNGUARDED.replace("num_workers=2,", 'num_workers=2, multiprocessing_context="spawn",')
    findings = check_source(source, "t.py", platform="linux")
    assert [(f.code, f.severity) for f in findings] == [("LD101", "error"), ("LD102", "error")]
    assert findings[0].message.endswith("which fails with its spawn/forkserver context")


@pytest.mark.slow
def test_unknown_platform_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown platform 'bsd'"):
        check_source(UNGUARDED, platform="bsd")
    result = lint("--platform", "bsd", str(CORPUS / "clean"))
    assert result.returncode == 2
    assert "invalid choice: 'bsd'" in result.stderr.splitlines()[-1]


@pytest.mark.slow
def test_fail_on_threshold(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED)
    assert lint("--platform", "linux", str(script)).returncode == 1  # warnings fail by default
    only_errors = lint("--platform", "linux", "--fail-on", "error", str(script))
    assert only_errors.returncode == 0
    assert only_errors.stdout.splitlines()[-1] == "2 warnings in 1 file (4 lines)"
    assert lint("--fail-on", "never", str(script)).returncode == 0
    assert lint("--platform", "windows", "--fail-on", "error", str(script)).returncode == 1


@pytest.mark.slow
def test_info_findings_are_hidden_unless_asked_for() -> None:
    path = CORPUS / "bad" / "ld107_object_tables.py"
    shown = check_paths([path])
    assert [f.severity for f in shown.findings] == ["warning", "warning"] and shown.hidden == 1
    everything = check_paths([path], min_severity="info")
    assert [f.severity for f in everything.findings] == ["warning", "info", "warning"]
    assert everything.hidden == 0
    assert format_text(shown).splitlines()[-1] == (
        "2 warnings in 1 file (48 lines); 1 info hidden (--severity info shows them)"
    )
    result = lint("--severity", "info", "--fail-on", "error", str(path))
    assert result.returncode == 0
    assert result.stdout.splitlines()[-1] == "2 warnings, 1 info in 1 file (48 lines)"


def test_text_format_puts_the_fix_under_each_finding() -> None:
    report = LintReport(
        findings=[LintFinding("a.py", 3, 5, "LD105", "why", "do this.", None, "error")],
        files_checked=2,
        lines_checked=10,
    )
    assert format_text(report) == (
        "a.py:3:5: LD105 [error] why\n    fix: do this.\n1 error in 2 files (10 lines)\n"
    )
    clean = LintReport(files_checked=1, lines_checked=1200, hidden=3, seconds=0.0421)
    assert format_text(clean) == (
        "0 findings in 1 file, 1,200 lines, 0.04 s; 3 info hidden (--severity info shows them)\n"
    )
    assert format_text(clean, summary=False) == ""  # --quiet


@pytest.mark.slow
def test_json_carries_severity_and_counts(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED)
    data = json.loads(lint("--format", "json", str(script)).stdout)
    assert [(f["code"], f["severity"]) for f in data["findings"]] == [
        ("LD101", "error"),
        ("LD102", "error"),
    ]
    assert (data["files_checked"], data["lines_checked"], data["hidden"]) == (1, 4, 0)
    assert LintReport.from_dict(data).findings[0].severity == "error"


def test_magic_inside_a_notebook_block_is_not_a_syntax_error(tmp_path: Path) -> None:
    cell = (
        "logger = 'x'\nif logger == 'x':\n  %pip install -q comet_ml\nelif logger == 'y':\n  !ls\n"
    )
    notebook = {"cells": [{"cell_type": "code", "source": cell}], "nbformat": 4}
    path = tmp_path / "tutorial.ipynb"
    path.write_text(json.dumps(notebook))
    assert check_paths([path]).findings == []


# -- SARIF 2.1.0 ---------------------------------------------------------------------------------

_LEVELS = {"none", "note", "warning", "error"}


def _check_sarif_structure(log: dict[str, object]) -> None:
    """The parts of the SARIF 2.1.0 schema that code-scanning UIs read, checked field by field."""
    assert log["version"] == "2.1.0"
    assert log["$schema"] == "https://json.schemastore.org/sarif-2.1.0.json"
    runs = log["runs"]
    assert isinstance(runs, list) and len(runs) == 1
    run = runs[0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "loaderdoctor" and isinstance(driver["version"], str)
    rules = driver["rules"]
    ids = [rule["id"] for rule in rules]
    assert len(ids) == len(set(ids))
    for rule in rules:
        assert set(rule) >= {"id", "name", "shortDescription", "fullDescription", "help"}
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        assert rule["defaultConfiguration"]["level"] in _LEVELS
        assert rule["name"].isalnum() and rule["name"][0].isupper()
    assert run["columnKind"] == "unicodeCodePoints"
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"].startswith("file:///")
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"].endswith("/")
    for result in run["results"]:
        assert result["ruleId"] in ids
        assert ids[result["ruleIndex"]] == result["ruleId"]
        assert result["level"] in _LEVELS
        assert result["message"]["text"]
        (location,) = result["locations"]
        artifact = location["physicalLocation"]["artifactLocation"]
        assert artifact["uriBaseId"] == "%SRCROOT%" and not artifact["uri"].startswith("/")
        region = location["physicalLocation"]["region"]
        assert isinstance(region["startLine"], int) and region["startLine"] >= 1
        assert region.get("startColumn", 1) >= 1
        assert all(isinstance(v, str) for v in result["partialFingerprints"].values())


@pytest.mark.slow
def test_sarif_log_is_valid_2_1_0() -> None:
    root = CORPUS / "projects" / "segmentation"
    result = lint("--format", "sarif", ".", cwd=root)
    assert result.returncode == 1, result.stderr
    log = json.loads(result.stdout)
    _check_sarif_structure(log)
    run = log["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == list(RULES)
    assert [
        (
            r["ruleId"],
            r["level"],
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
        )
        for r in run["results"]
    ] == [
        ("LD107", "warning", "seg/data/base.py", 11),
        ("LD109", "warning", "seg/data/base.py", 12),
        ("LD101", "error", "tools/train.py", 25),
    ]


def test_sarif_notebook_and_info_results() -> None:
    report = LintReport(
        findings=[
            LintFinding("nb.ipynb", 4, 2, "LD102", "m", "f.", 3, "error"),
            LintFinding("a.py", 1, 1, "LD107", "m", "f.", None, "info"),
        ]
    )
    log = sarif_log(report, RULES, "0.1.0", base=Path.cwd())
    _check_sarif_structure(log)
    notebook, info = log["runs"][0]["results"]
    assert notebook["message"]["text"] == "(code cell 3, line 4) m. Fix: f."
    assert notebook["properties"] == {"severity": "error", "cell": 3}
    assert notebook["locations"][0]["physicalLocation"]["region"] == {"startLine": 1}
    assert info["level"] == "note"
