"""Renderers for ``loaderdoctor scan``: a rich summary with tables, and JSON."""

from __future__ import annotations

import json
from typing import IO

from loaderdoctor.scan.model import ScanReport

MAX_ROWS = 20


def format_json(report: ScanReport) -> str:
    return json.dumps(report.to_json(), indent=2) + "\n"


def format_summary(report: ScanReport) -> str:
    """One line: the counts, the time and the throughput."""
    verdict = "clean" if report.clean else f"{len(report.bad)} bad"
    return (
        f"scanned {report.total} samples in {report.seconds:.1f} s "
        f"({report.throughput:.1f} samples/s, {report.num_workers} workers): {verdict}, "
        f"{len(report.outliers)} outliers"
    )


def print_text(report: ScanReport, file: IO[str], quarantine_path: str | None = None) -> None:
    """The summary line, then a table per finding kind (bad, outliers, slowest)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(file=file, highlight=False, soft_wrap=True)
    console.print(escape(format_summary(report)))
    if report.bad:
        table = Table(title="bad samples", title_justify="left")
        for column in ("index", "cause", "file", "message"):
            table.add_column(column, overflow="fold")
        for bad in report.bad[:MAX_ROWS]:
            table.add_row(
                str(bad.index), escape(bad.cause), escape(bad.file or "-"), escape(bad.message)
            )
        console.print(table)
        if len(report.bad) > MAX_ROWS:
            console.print(f"... and {len(report.bad) - MAX_ROWS} more (see --json)")
        if quarantine_path is not None:
            console.print(
                escape(
                    f"quarantine written to {quarantine_path}: "
                    f"loaderdoctor.DataLoader(..., quarantine={quarantine_path!r}) skips them"
                )
            )
    if report.outliers:
        table = Table(
            title=escape(f"outliers (default_collate expects {report.structure})"),
            title_justify="left",
        )
        for column in ("index", "structure", "file"):
            table.add_column(column, overflow="fold")
        for outlier in report.outliers[:MAX_ROWS]:
            table.add_row(
                str(outlier.index), escape(outlier.structure), escape(outlier.file or "-")
            )
        console.print(table)
        if len(report.outliers) > MAX_ROWS:
            console.print(f"... and {len(report.outliers) - MAX_ROWS} more (see --json)")
    if report.slowest:
        table = Table(title="slowest samples", title_justify="left")
        for column in ("index", "ms", "file"):
            table.add_column(column, overflow="fold")
        for slow in report.slowest:
            table.add_row(str(slow.index), f"{slow.seconds * 1000:.1f}", escape(slow.file or "-"))
        console.print(table)
