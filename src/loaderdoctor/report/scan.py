"""Renderers for ``loaderdoctor scan``: a rich summary with tables, and JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from loaderdoctor.report.console import render_plain, terminal, width_for
from loaderdoctor.scan.model import ScanReport
from loaderdoctor.units import format_bytes, format_mib, format_ms, format_seconds

if TYPE_CHECKING:
    from rich.console import Console

MAX_ROWS = 20


def format_json(report: ScanReport) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"


def format_summary(report: ScanReport) -> str:
    """The counts, the time and the throughput; then the settings, if the report records any."""
    verdict = "clean" if report.clean else f"{len(report.bad)} bad"
    rate = f"{report.throughput:.1f} samples/s, {report.num_workers} workers"
    took = format_seconds(report.seconds)
    if report.resumed:  # the time is this run's: say which samples it covers
        counts = (
            f"scanned {report.total} samples: {report.resumed} before the interruption (from "
            f"the checkpoint), {report.total - report.resumed} now in {took} ({rate})"
        )
    else:
        counts = f"scanned {report.total} samples in {took} ({rate})"
    counts += f": {verdict}, {len(report.outliers)} outliers"
    if report.flaky:
        counts += f", {len(report.flaky)} flaky"
    settings = format_settings(report)
    return f"{counts}\nsettings: {settings}" if settings else counts


def format_settings(report: ScanReport) -> str:
    """What bounded each fetch: timeout, memory cap and how, ranks, checkpoint ("" if none)."""
    parts = []
    if report.timeout is not None:
        parts.append(f"timeout {report.timeout:g} s")
    if report.mem_limit_bytes is not None:
        how = f" ({report.mem_cap})" if report.mem_cap else ""
        parts.append(
            f"memory cap {format_bytes(report.mem_limit_bytes, trim=True)} per worker{how}"
        )
    elif report.mem_cap:
        parts.append(f"no memory cap ({report.mem_cap})")
    if report.ranks > 1:
        parts.append(f"{report.ranks} ranks")
    if report.shards:
        nodes = len({shard.node_id for shard in report.shards})
        parts.append(f"Ray: {len(report.shards)} shards on {nodes} node{'s' if nodes != 1 else ''}")
    if report.resumed > 0:
        parts.append(f"{report.resumed} samples from checkpoint")
    return ", ".join(parts)


def format_worker_startup(report: ScanReport) -> str:
    """Each worker's first fetch beyond that sample's own time, kept out of the slowest list."""
    startup = sorted(report.worker_startup)
    median = startup[len(startup) // 2]
    return (
        f"worker start-up (a first fetch beyond the sample's own time, not in the slowest "
        f"samples): median {median * 1000:.1f} ms, max {startup[-1] * 1000:.1f} ms "
        f"over {len(startup)} workers"
    )


def print_text(
    report: ScanReport, file: IO[str] | None = None, *, quarantine_path: str | None = None
) -> None:
    """The summary, then a table per finding kind (bad, outliers, slowest, memory-hungry)."""
    with terminal(file, width=width_for(file), soft_wrap=True) as console:
        print_report(report, console, quarantine_path)


def format_text(report: ScanReport, width: int = 100) -> str:
    return render_plain(print_report, report, width, soft_wrap=True)


def print_report(report: ScanReport, console: Console, quarantine_path: str | None = None) -> None:
    from rich.markup import escape

    console.print(escape(format_summary(report)))
    _print_bad(report, console, quarantine_path)
    _print_flaky(report, console)
    _print_outliers(report, console)
    _print_costs(report, console)


def _print_bad(report: ScanReport, console: Console, quarantine_path: str | None) -> None:
    from rich.markup import escape

    if report.shared_failure is not None:
        console.print(escape(f"shared failure: {report.shared_failure}"))
    if report.bad:
        _print_samples("bad samples", report.bad, console)
        if quarantine_path is not None:
            console.print(
                escape(
                    f"quarantine written to {quarantine_path}: "
                    f"loaderdoctor.DataLoader(..., quarantine={quarantine_path!r}) skips them"
                )
            )


FLAKY_TITLE = "flaky samples (killed a worker once, loaded when re-tried alone)"


def _print_flaky(report: ScanReport, console: Console) -> None:
    if report.flaky:
        _print_samples(FLAKY_TITLE, report.flaky, console)


def _print_samples(title: str, samples: Sequence[Any], console: Console) -> None:
    """One table of samples (index, cause, file, message), the first MAX_ROWS of them."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title), title_justify="left")
    for column in ("index", "cause", "file", "message"):
        table.add_column(column, overflow="fold")
    for sample in samples[:MAX_ROWS]:
        table.add_row(
            str(sample.index), escape(sample.cause), escape(sample.file or "-"),
            escape(sample.message),
        )  # fmt: skip
    console.print(table)
    if len(samples) > MAX_ROWS:
        console.print(f"... and {len(samples) - MAX_ROWS} more (see --json)")


def _print_outliers(report: ScanReport, console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

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


def _print_costs(report: ScanReport, console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    if report.slowest:
        table = Table(title="slowest samples", title_justify="left")
        for column in ("index", "ms", "file"):
            table.add_column(column, overflow="fold")
        for slow in report.slowest:
            table.add_row(str(slow.index), format_ms(slow.seconds), escape(slow.file or "-"))
        console.print(table)
    if report.worker_startup:
        console.print(escape(format_worker_startup(report)))
    if report.hungriest:
        table = Table(title="memory-hungry samples", title_justify="left")
        for column in ("index", "peak MiB", "file"):
            table.add_column(column, overflow="fold")
        for hungry in report.hungriest:
            table.add_row(
                str(hungry.index),
                format_mib(hungry.peak_bytes, decimals=1),
                escape(hungry.file or "-"),
            )
        console.print(table)
