"""``loaderdoctor top``'s views of a ``TopSnapshot``: plain text (``--once``), JSON, and the rich
table a terminal refreshes in place. One set of cells for all three: ``worker_cells``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from loaderdoctor.report.output import printable
from loaderdoctor.top.model import LoaderView, ProcessView, TopSnapshot, WorkerView
from loaderdoctor.units import format_bytes

if TYPE_CHECKING:
    from rich.console import RenderableType

WORKER_HEADER = ("worker", "pid", "state", "sample", "for", "RSS", "CPU %", "batches/s", "")
FLAG_STYLES = {"hung": "bold red", "slow": "bold yellow"}


def format_json(snapshot: TopSnapshot) -> str:
    return json.dumps(snapshot.to_dict(), indent=2) + "\n"


def _number(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.1f}{unit}"


def _duration(seconds: float) -> str:
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _sample(worker: WorkerView) -> str:
    if worker.in_flight_key is not None:
        return worker.in_flight_key
    return "-" if worker.in_flight_index is None else str(worker.in_flight_index)


def flag_text(worker: WorkerView, hang_after_s: float | None) -> str:
    """``HUNG (past 1m00s)`` past the loader's hang threshold, ``SLOW (typical 0.2 s)`` far past
    the worker's typical sample time; else nothing."""
    if worker.flag == "hung":
        return f"HUNG (past {_duration(hang_after_s or 0)})"
    if worker.flag == "slow":
        return f"SLOW (typical {_duration(worker.typical_sample_s or 0)})"
    return ""


def worker_cells(worker: WorkerView, hang_after_s: float | None) -> tuple[str, ...]:
    return (
        str(worker.worker_id),
        "-" if worker.pid is None else str(worker.pid),
        worker.state,
        _sample(worker),
        _duration(worker.state_for_s),
        format_bytes(worker.rss_bytes) if worker.rss_bytes else "-",
        _number(worker.cpu_percent),
        _number(worker.batches_per_s),
        flag_text(worker, hang_after_s),
    )


def header_lines(snapshot: TopSnapshot) -> list[str]:
    shm = ""
    if snapshot.shm_used_bytes is not None and snapshot.shm_total_bytes is not None:
        used, total = format_bytes(snapshot.shm_used_bytes), format_bytes(snapshot.shm_total_bytes)
        shm = f" · /dev/shm {used} of {total}"
    incidents = f"{snapshot.incidents} incident{'' if snapshot.incidents == 1 else 's'}"
    return [
        f"loaderdoctor top: {snapshot.report_dir} (run pid {snapshot.run_pid}, up "
        f"{_duration(snapshot.up_s)}) · {incidents}{shm}",
        f"command: {' '.join(snapshot.command)}",
    ]


def process_line(process: ProcessView) -> str:
    where = [f"rank {process.rank}"] if process.rank is not None else []
    if process.node is not None:
        where.insert(0, f"node {process.node}")
    said = f" ({', '.join(where)})" if where else ""
    batches = process.batches_delivered
    return f"process {process.pid}{said} · {batches} batch{'' if batches == 1 else 'es'} delivered"


def loader_line(loader: LoaderView) -> str:
    rates = ""
    if loader.batches_per_s is not None:
        rates = (
            f" · {loader.batches_per_s:.1f} batches/s · {loader.samples_per_s or 0:.1f} samples/s"
        )
    workers = f"{loader.num_workers} worker{'' if loader.num_workers == 1 else 's'}"
    incidents = f"{loader.incidents} incident{'' if loader.incidents == 1 else 's'}"
    hang = (
        "no hang watch"
        if loader.hang_after_s is None
        else f"hung after {_duration(loader.hang_after_s)}"
    )
    return f"loader {loader.site} · {workers}{rates} · {incidents} · {hang}"


def format_text(snapshot: TopSnapshot) -> str:
    """The snapshot as plain text: a header, then per process, per loader, a table of workers."""
    lines = header_lines(snapshot)
    for process in snapshot.processes:
        lines.append(process_line(process))
        for loader in process.loaders:
            lines.append("  " + loader_line(loader))
            if not loader.workers:
                lines.append("    no pool of workers running (between epochs, or not iterated)")
                continue
            rows = [WORKER_HEADER] + [
                worker_cells(worker, loader.hang_after_s) for worker in loader.workers
            ]
            widths = [max(len(row[i]) for row in rows) for i in range(len(WORKER_HEADER))]
            for row in rows:
                cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
                lines.append(("    " + "  ".join(cells)).rstrip())
    lines.extend(f"note: {note}" for note in snapshot.notes)
    return printable("\n".join(lines) + "\n")[0]


def renderable(snapshot: TopSnapshot) -> RenderableType:
    """The same, as rich renderables for a live display: flagged workers highlighted."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[RenderableType] = [Text(line) for line in header_lines(snapshot)]
    for process in snapshot.processes:
        parts.append(Text(process_line(process), style="bold"))
        for loader in process.loaders:
            parts.append(Text("  " + loader_line(loader), style="cyan"))
            if not loader.workers:
                continue
            table = Table(box=None, padding=(0, 1), pad_edge=False)
            for name in WORKER_HEADER:
                table.add_column(name, no_wrap=True)
            for worker in loader.workers:
                style = FLAG_STYLES.get(worker.flag or "")
                table.add_row(*worker_cells(worker, loader.hang_after_s), style=style)
            parts.append(table)
    parts.extend(Text(f"note: {note}", style="dim") for note in snapshot.notes)
    parts.append(Text("q or Ctrl-C: detach (the job carries on)", style="dim"))
    return Group(*parts)
