"""Renderers for ``loaderdoctor lint``: flake8-style text, JSON, SARIF 2.1.0, the rule catalog."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePath
from typing import Any

from loaderdoctor.lint.catalog import Rule
from loaderdoctor.lint.findings import FixRecord, LintFinding, LintReport, Unparsed

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
_SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note"}
INFORMATION_URI = "https://github.com/loaderdoctor/loaderdoctor"


def format_location(finding: LintFinding) -> str:
    """``path:line:col``; notebooks as ``path:cell_N:line:col`` (the nbqa convention)."""
    if finding.cell is not None:
        return f"{finding.path}:cell_{finding.cell}:{finding.line}:{finding.col}"
    return f"{finding.path}:{finding.line}:{finding.col}"


def format_finding(finding: LintFinding) -> str:
    return f"{format_location(finding)}: {finding.code} [{finding.severity}] {finding.message}"


def format_text(report: LintReport, show_fixes: bool = True, summary: bool = True) -> str:
    """One line per finding, flake8 style, its fix indented under it, then a summary line.

    A clean run prints one line, ``0 findings in N files, M lines, T s``, so a user sees that
    the files were read at all; ``summary=False`` (``--quiet``) prints only the findings.
    """
    lines = [f"fixed {format_fix(record)}" for record in report.fixed]
    lines += [f"not fixed {format_fix(record)}" for record in report.unfixed]
    lines += [format_unparsed(item) for item in report.unparsed]
    for finding in report.findings:
        lines.append(format_finding(finding))
        if show_fixes and finding.fix:
            lines.append(f"    fix: {finding.fix}")
    if summary:
        lines.append(format_summary(report) if report.findings else format_clean(report))
    return "\n".join(lines) + ("\n" if lines else "")


def format_clean(report: LintReport) -> str:
    text = (
        f"0 findings in {_plural(report.files_checked, 'file')}, "
        f"{_plural(report.lines_checked, 'line')}, {report.seconds:.2f} s"
    )
    if report.hidden:
        text += f"; {report.hidden} info hidden (--severity info shows them)"
    return text


def format_summary(report: LintReport) -> str:
    counts = [
        _plural(report.count(severity), severity)
        for severity in ("error", "warning", "info")
        if report.count(severity)
    ]
    found = ", ".join(counts) if counts else "no findings"
    text = f"{found} in {_plural(report.files_checked, 'file')} ({report.lines_checked:,} lines)"
    if report.hidden:
        text += f"; {report.hidden} info hidden (--severity info shows them)"
    return text


def _plural(count: int, noun: str) -> str:
    if noun == "info":
        return f"{count} info"
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def format_unparsed(item: Unparsed) -> str:
    return f"not parsed {item.path}:{item.line}: {item.message}"


def format_fix(record: FixRecord) -> str:
    return f"{record.path}:{record.line}: {record.code} {record.description}"


def format_json(report: LintReport) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"


def sarif_log(
    report: LintReport, rules: Mapping[str, Rule], version: str, base: Path | None = None
) -> dict[str, Any]:
    """The report as a SARIF 2.1.0 log (code-scanning UIs: GitHub, GitLab, VS Code).

    Paths are relative to ``base`` (the current directory) under the ``%SRCROOT%`` base id, as
    code scanning expects; notebook findings point at the ``.ipynb`` file and carry the code
    cell in ``properties`` and in the message.
    """
    base = base or Path.cwd()
    rule_ids = list(rules)
    driver_rules = [
        {
            "id": rule.code,
            "name": _rule_name(rule.title),
            "shortDescription": {"text": rule.title},
            "fullDescription": {"text": rule.why},
            "help": {"text": f"{rule.why}\n\nFix: {rule.fix}", "markdown": _help(rule)},
            "defaultConfiguration": {"level": _SARIF_LEVELS[rule.severity]},
            "properties": {"tags": ["pytorch", "dataloader"], "fixable": rule.fixable},
        }
        for rule in rules.values()
    ]
    results = [_sarif_result(finding, rule_ids, base) for finding in report.findings]
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "loaderdoctor",
                        "version": version,
                        "informationUri": INFORMATION_URI,
                        "rules": driver_rules,
                    }
                },
                "columnKind": "unicodeCodePoints",
                "originalUriBaseIds": {"%SRCROOT%": {"uri": base.resolve().as_uri() + "/"}},
                "results": results,
            }
        ],
    }


def format_sarif(
    report: LintReport, rules: Mapping[str, Rule], version: str, base: Path | None = None
) -> str:
    return json.dumps(sarif_log(report, rules, version, base), indent=2) + "\n"


def _sarif_result(finding: LintFinding, rule_ids: list[str], base: Path) -> dict[str, Any]:
    message = finding.message
    if finding.fix:
        message += f". Fix: {finding.fix}"
    region: dict[str, int] = {"startLine": finding.line, "startColumn": finding.col}
    properties: dict[str, Any] = {"severity": finding.severity}
    if finding.cell is not None:
        message = f"(code cell {finding.cell}, line {finding.line}) {message}"
        properties["cell"] = finding.cell
        region = {"startLine": 1}  # the line of a cell is not a line of the .ipynb file
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "level": _SARIF_LEVELS[finding.severity],
        "message": {"text": message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": _uri(finding.path, base), "uriBaseId": "%SRCROOT%"},
                    "region": region,
                }
            }
        ],
        "partialFingerprints": {
            "loaderdoctor/v1": f"{finding.code}:{_uri(finding.path, base)}:{finding.message}"
        },
        "properties": properties,
    }
    if finding.code in rule_ids:
        result["ruleIndex"] = rule_ids.index(finding.code)
    return result


def _uri(path: str, base: Path) -> str:
    resolved = Path(path).resolve()
    try:
        relative: PurePath = resolved.relative_to(base.resolve())
    except ValueError:
        return resolved.as_uri()
    return relative.as_posix()


def _rule_name(title: str) -> str:
    words = [word for word in title.replace("-", " ").split() if word.isalnum()]
    return "".join(word[:1].upper() + word[1:] for word in words)


def _help(rule: Rule) -> str:
    return f"**{rule.code}: {rule.title}**\n\n{rule.why}\n\n**Fix:** {rule.fix}"


def format_rules(rules: Mapping[str, Rule] | Iterable[Rule]) -> str:
    """The catalog: code, severity and title, then why and fix wrapped under it."""
    rows = rules.values() if isinstance(rules, Mapping) else rules
    blocks: list[str] = []
    for rule in rows:
        fixable = " [fixable]" if rule.fixable else ""
        spawn = ", spawn-only" if rule.spawn_only else ""
        block = [f"{rule.code}  {rule.title} ({rule.severity}{spawn}){fixable}"]
        for label, text in (("why", rule.why), ("fix", rule.fix)):
            block.append(
                textwrap.fill(
                    text, width=96, initial_indent=f"       {label}: ", subsequent_indent=" " * 12
                )
            )
        blocks.append("\n".join(block))
    return "\n\n".join(blocks) + "\n"
