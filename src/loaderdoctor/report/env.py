"""Renderers for ``EnvReport``: a rich terminal table, and JSON."""

from __future__ import annotations

import json
from typing import IO, TYPE_CHECKING, Any

from loaderdoctor.env.catalog import CATALOG_BY_ID
from loaderdoctor.env.findings import STATUSES, EnvCheck, EnvReport
from loaderdoctor.report.console import render_plain, terminal
from loaderdoctor.units import format_bytes

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

STATUS_STYLES = {"pass": "green", "warn": "yellow", "fail": "bold red", "unknown": "dim"}


def format_value(check: EnvCheck) -> str:
    value: Any = check.value
    if value is None:
        return "-"
    spec = CATALOG_BY_ID.get(check.id)
    unit = spec.unit if spec is not None else "text"
    if unit == "bytes" and isinstance(value, (int, float)):
        return format_bytes(value)
    if isinstance(value, dict):
        return ", ".join(f"{key} {item}" for key, item in value.items() if item is not None)
    return str(value)


def format_summary(report: EnvReport) -> str:
    """``"8 pass, 2 warn, 1 fail, 0 unknown"``: one word per status."""
    counts = report.counts()
    return ", ".join(f"{counts[status]} {status}" for status in STATUSES)


def build_table(report: EnvReport) -> Table:
    from rich.table import Table
    from rich.text import Text

    title = "loaderdoctor env" + (f": {report.target}" if report.target else "")
    table = Table(title=Text(title), title_justify="left", expand=False)
    table.add_column("status", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("value", overflow="fold", max_width=24)
    table.add_column("finding", overflow="fold", ratio=1)
    for check in report.checks:
        table.add_row(
            Text(check.status, style=STATUS_STYLES.get(check.status, "")),
            Text(check.id),
            Text(format_value(check)),
            Text(check.message),
        )
    return table


def print_text(report: EnvReport, file: IO[str] | None = None) -> None:
    """The table, the fixes of what failed or warned, the counts; rich loads here only."""
    with terminal(file) as console:
        print_report(report, console)


def print_report(report: EnvReport, console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    console.print(build_table(report))
    to_fix = [check for check in report.checks if check.status in ("fail", "warn")]
    if to_fix:
        console.print()
        console.print(Text("fixes", style="bold"))
        fixes = Table.grid(padding=(0, 1))
        fixes.add_column(no_wrap=True)
        fixes.add_column(overflow="fold")
        for check in to_fix:
            fixes.add_row(
                Text(f"  {check.id}:", style=STATUS_STYLES[check.status]), Text(check.fix)
            )
        console.print(fixes)
    if report.internal_errors:
        console.print()
        console.print(Text("loaderdoctor's own errors (a bug: please report it)", style="bold red"))
        for line in report.internal_errors:
            console.print(Text(f"  {line}"))
    console.print()
    console.print(Text(format_summary(report)))


def format_text(report: EnvReport, width: int = 100) -> str:
    """The terminal rendering without colour, at a fixed width: what tests and logs compare."""
    return render_plain(print_report, report, width)


def format_json(report: EnvReport) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"
