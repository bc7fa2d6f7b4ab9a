"""The real ``loaderdoctor lint`` in a subprocess: output, formats and exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).parent / "lint_corpus"


def lint(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loaderdoctor", "lint", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_findings_exit_one_with_flake8_lines() -> None:
    path = CORPUS / "bad" / "ld101_top_level_loop.py"
    result = lint(str(path))
    assert result.returncode == 1, result.stderr
    assert result.stdout == (
        f"{path}:7:10: LD101 [error] DataLoader with num_workers=4 is created and iterated at "
        'module top level without an `if __name__ == "__main__":` guard: each spawned worker '
        "re-imports the script and starts workers again while bootstrapping, which fails on "
        "Windows and macOS (spawn) and Linux from Python 3.14 (forkserver)\n"
        "    fix: Move the training code into a function and call it under "
        '`if __name__ == "__main__":`.\n'
        "1 error in 1 file (15 lines)\n"
    )


@pytest.mark.slow
def test_clean_folder_says_what_was_read_in_one_line() -> None:
    clean = sorted((CORPUS / "clean").glob("*.py"))
    lines = sum(path.read_text().count("\n") + 1 for path in clean)
    result = lint(str(CORPUS / "clean"))
    assert (result.returncode, result.stderr) == (0, "")
    assert re.fullmatch(
        rf"0 findings in {len(clean)} files, {lines:,} lines, \d+\.\d\d s; "
        r"5 info hidden \(--severity info shows them\)\n",
        result.stdout,
    ), result.stdout


@pytest.mark.slow
def test_quiet_clean_run_prints_nothing() -> None:
    result = lint("--quiet", str(CORPUS / "clean"))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--select", "--ignore"])
def test_unknown_rule_code_is_a_usage_error(option: str) -> None:
    result = lint(option, "LD101,LD999", str(CORPUS / "clean"))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines()[-1].endswith(
        f"{option}: 'LD999' is not a rule code or prefix; the codes are LD000, LD101, LD102, "
        "LD103, LD104, LD105, LD106, LD107, LD108, LD109, LD110, LD111, LD112, LD113 "
        "(loaderdoctor lint --list-rules "
        "explains them)"
    ), result.stderr


@pytest.mark.slow
def test_json_format_select_and_ignore() -> None:
    result = lint(
        "--format", "json", "--select", "LD10", "--ignore", "LD107,LD108", str(CORPUS / "bad")
    )
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == 1
    found = {finding["code"] for finding in data["findings"]}
    assert found == {"LD101", "LD102", "LD103", "LD104", "LD105", "LD106", "LD109"}
    assert all(
        set(f) >= {"path", "line", "col", "code", "message", "fix"} for f in data["findings"]
    )


@pytest.mark.slow
def test_usage_errors_exit_two_with_one_line() -> None:
    missing = lint("does/not/exist.py")
    assert missing.returncode == 2
    assert (
        missing.stderr == "loaderdoctor lint: error: no such file or directory: does/not/exist.py\n"
    )
    assert lint().returncode == 2
    assert lint("--select", "E501", str(CORPUS)).returncode == 2


@pytest.mark.slow
def test_syntax_error_is_reported_as_ld000(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def train(:\n    pass\n")
    result = lint(str(broken))
    assert result.returncode == 1
    assert (
        result.stdout.splitlines()[0]
        == f"{broken}:1:11: LD000 [error] cannot parse: invalid syntax"
    )
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_list_rules_prints_the_catalog() -> None:
    from loaderdoctor.lint import RULES

    result = lint("--list-rules")
    assert result.returncode == 0
    for rule in RULES.values():
        assert f"{rule.code}  {rule.title}" in result.stdout


def test_pre_commit_hook_definition() -> None:
    text = (Path(__file__).parent.parent / ".pre-commit-hooks.yaml").read_text()
    hook = [line.strip() for line in text.splitlines() if line and not line.startswith("#")]
    assert hook == [
        "- id: loaderdoctor-lint",
        "name: loaderdoctor lint",
        "description: Static checks of PyTorch training code for DataLoader multiprocessing "
        "pitfalls.",
        "entry: loaderdoctor lint",
        "language: python",
        "types_or: [python, jupyter]",
        "pass_filenames: false",
        "args: [.]",
    ]


@pytest.mark.slow
def test_help_teaches_the_options() -> None:
    result = lint("--help")
    assert result.returncode == 0
    for option in ("--platform", "--severity", "--fail-on", "--format", "sarif", "examples:"):
        assert option in result.stdout, option


def test_readme_rule_table_matches_the_catalog() -> None:
    from loaderdoctor.lint import RULES

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| `LD")]
    assert rows == [
        f"| `{rule.code}` | {rule.severity}{' (spawn-only)' if rule.spawn_only else ''} "
        f"| {rule.title} |"
        for rule in RULES.values()
    ]
