"""Renderers for ``loaderdoctor lint``: flake8-style text, JSON, the rule catalog, applied fixes."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable, Mapping

from loaderdoctor.lint.catalog import Rule
from loaderdoctor.lint.findings import FixRecord, LintFinding, LintReport


def format_location(finding: LintFinding) -> str:
    """``path:line:col``; notebooks as ``path:cell_N:line:col`` (the nbqa convention)."""
    if finding.cell is not None:
        return f"{finding.path}:cell_{finding.cell}:{finding.line}:{finding.col}"
    return f"{finding.path}:{finding.line}:{finding.col}"


def format_finding(finding: LintFinding) -> str:
    return f"{format_location(finding)}: {finding.code} {finding.message}"


def format_text(report: LintReport) -> str:
    """One line per finding, flake8 style, in path/line/column order (empty when clean)."""
    lines = [f"fixed {format_fix(record)}" for record in report.fixed]
    lines.extend(format_finding(finding) for finding in report.findings)
    return "\n".join(lines) + ("\n" if lines else "")


def format_fix(record: FixRecord) -> str:
    return f"{record.path}:{record.line}: {record.code} {record.description}"


def format_json(report: LintReport) -> str:
    return json.dumps(report.to_json(), indent=2) + "\n"


def format_rules(rules: Mapping[str, Rule] | Iterable[Rule]) -> str:
    """The catalog: code and title, then why and fix wrapped under it."""
    rows = rules.values() if isinstance(rules, Mapping) else rules
    blocks: list[str] = []
    for rule in rows:
        fixable = " [fixable]" if rule.fixable else ""
        block = [f"{rule.code}  {rule.title}{fixable}"]
        for label, text in (("why", rule.why), ("fix", rule.fix)):
            block.append(
                textwrap.fill(
                    text, width=96, initial_indent=f"       {label}: ", subsequent_indent=" " * 12
                )
            )
        blocks.append("\n".join(block))
    return "\n\n".join(blocks) + "\n"
