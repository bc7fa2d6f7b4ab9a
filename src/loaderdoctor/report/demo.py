"""Renderers for ``DemoReport``: a rich panel per verdict and a summary table, and JSON."""

from __future__ import annotations

import json
import os
import re
from typing import IO, TYPE_CHECKING

from loaderdoctor.forensics.catalog import page_command
from loaderdoctor.report.console import render_plain, terminal
from loaderdoctor.report.text import crashing_thread_first
from loaderdoctor.units import format_seconds

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from loaderdoctor.demo.scenarios import DemoReport, ScenarioResult
    from loaderdoctor.forensics.evidence import Diagnosis

# Causes whose verdict is about where the worker was: show the top of its Python stack.
STACK_CAUSES = ("native-crash", "worker-hang")
STACK_FRAMES = 4
KEY_EVIDENCE = 3
# Evidence lines the panel already says in its "where" row.
REDUNDANT_EVIDENCE = ("in flight:", "batch indices:")
FRAME_PATTERN = re.compile(r'^\s*File "(?P<path>.+)", line (?P<line>\d+) in (?P<function>.+)$')


def short_path(path: str) -> str:
    """``.../site-packages/torch/x.py`` -> ``torch/x.py``; else the last three parts."""
    for marker in ("site-packages/", "/src/"):
        if marker in path:
            return path.split(marker, 1)[1]
    parts = path.split("/")
    return "/".join(parts[-3:]) if len(parts) > 3 else path


def top_frames(python_stack: str, count: int = STACK_FRAMES) -> list[str]:
    """The innermost frames of the crashing (or stuck) thread: ``function  (file:line)``."""
    blocks = crashing_thread_first(python_stack).split("\n\n")
    thread = next((b for b in blocks if "thread" in b.splitlines()[0].lower()), "")
    frames = []
    for line in thread.splitlines()[1:]:
        match = FRAME_PATTERN.match(line)
        if match:
            frames.append(f"{match['function']}  ({short_path(match['path'])}:{match['line']})")
        if len(frames) == count:
            break
    return frames


def key_evidence(result: ScenarioResult) -> list[str]:
    if result.diagnosis is None:
        return []
    lines = [e for e in result.diagnosis.evidence if not e.startswith(REDUNDANT_EVIDENCE)]
    return lines[:KEY_EVIDENCE]


def relative_to(path: str, root: str) -> str:
    """``path`` below ``root`` as a relative path (the demo's temporary root is long and gone)."""
    if root and os.path.isabs(path) and path.startswith(root.rstrip(os.sep) + os.sep):
        return os.path.relpath(path, root)
    return path


def format_planted(result: ScenarioResult) -> str:
    """``5 (circle_05.jpg)``: the index and file where the fault was planted."""
    name = os.path.basename(result.planted_file)
    return f"{result.planted_index}" + (f" ({name})" if name else "")


def format_samples(d: Diagnosis, root: str = "", basename: bool = False) -> str:
    """The samples a verdict names: ``5 (corrupt-jpeg/circle/circle_05.jpg)``."""
    text = ", ".join(repr(index) for index in d.indices)
    if d.sample_file:
        shown = os.path.basename(d.sample_file) if basename else relative_to(d.sample_file, root)
        text += f" ({shown})"
    return text


def verdict_label(result: ScenarioResult) -> str:
    d = result.diagnosis
    return d.cause if d is not None else "no verdict"


def build_panel(result: ScenarioResult, number: int, total: int) -> RenderableType:
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    d = result.diagnosis
    mark, style = ("✓", "green") if result.passed else ("✗", "bold red")
    rows = Table.grid(padding=(0, 2))
    rows.add_column(style="dim", no_wrap=True, min_width=len("stock torch"))
    rows.add_column(overflow="fold")
    rows.add_row("planted", Text(f"sample {format_planted(result)}: {result.planted}"))
    if result.stock_message:
        rows.add_row("stock torch", Text(result.stock_message, style="yellow"))
    if d is None:
        rows.add_row("verdict", Text(result.error or "no verdict", style="bold red"))
        rows.add_row("expected", Text(_expectation(result), style="bold red"))
    else:
        verdict = Text()
        verdict.append(d.title, style="bold")
        verdict.append(f" (confidence {d.confidence:.2f})", style="cyan")
        rows.add_row("verdict", verdict)
        if result.heal_action is not None:
            healed = (
                f"{result.heal_action}: {result.delivered_samples} of the other samples "
                f"delivered, quarantine {result.quarantine}"
            )
            rows.add_row("healed", Text(healed, style="bold green"))
        if d.worker_id is not None:
            batch = f", batch {d.batch}" if d.batch is not None else ""
            rows.add_row("worker", Text(f"{d.worker_id} (pid {d.pid}){batch}"))
        if d.indices:
            root = os.path.dirname(result.dataset_dir.rstrip(os.sep))
            rows.add_row("sample", Text(format_samples(d, root)))
        for label, line in zip(("evidence", *([""] * KEY_EVIDENCE)), key_evidence(result)):
            rows.add_row(label, Text(line))
        if d.cause in STACK_CAUSES and d.python_stack:
            frames = top_frames(d.python_stack)
            for label, frame in zip(("stack", *([""] * STACK_FRAMES)), frames):
                rows.add_row(label, Text(frame, style="magenta"))
        if d.fixes:
            rows.add_row("fix", Text(d.fixes[0], style="green"))
        if d.docs:
            rows.add_row("more", Text(page_command(d.cause)))
        if not result.passed:
            rows.add_row("expected", Text(_expectation(result), style="bold red"))
    title = Text()
    title.append(f"{mark} {number}/{total} ", style=style)
    title.append(result.name, style="bold")
    title.append(f" → {verdict_label(result)}", style=style)
    return Panel(
        rows,
        title=title,
        title_align="left",
        subtitle=format_seconds(result.seconds),
        subtitle_align="right",
        border_style="green" if result.passed else "red",
    )


def _expectation(result: ScenarioResult) -> str:
    text = f"{result.expected_cause} naming sample {result.planted_index}"
    if result.names_file:
        text += f" ({result.planted_file})"
    return text


def build_summary(report: DemoReport) -> RenderableType:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="loaderdoctor demo", title_justify="left", expand=False)
    table.add_column("scenario", no_wrap=True)
    table.add_column("planted in sample", overflow="fold")
    table.add_column("verdict", no_wrap=True)
    table.add_column("verdict names sample", overflow="fold")
    for result in report.scenarios:
        d = result.diagnosis
        if d is None:
            named = result.error or ""
        else:
            named = format_samples(d, basename=True)
        mark, style = ("✓", "green") if result.passed else ("✗", "bold red")
        table.add_row(
            Text(result.name),
            Text(format_planted(result)),
            Text(f"{mark} {verdict_label(result)}", style=style),
            Text(named),
        )
    return table


def format_outcome(report: DemoReport) -> str:
    good = sum(result.passed for result in report.scenarios)
    total = len(report.scenarios)
    seconds = format_seconds(report.seconds)
    if report.passed:
        return f"{good} of {total} planted faults got the expected verdict in {seconds}."
    return (
        f"{good} of {total} planted faults got the expected verdict in {seconds}: "
        "loaderdoctor does not work as it should on this machine (please report it, with --json)."
    )


def print_intro(console: Console, images: int, batch_size: int, num_workers: int) -> None:
    from rich.text import Text

    console.print(
        Text(
            f"Each scenario plants one fault among {images} generated images and loads them with "
            f"loaderdoctor.DataLoader(batch_size={batch_size}, num_workers={num_workers}) "
            "until it fails."
        )
    )


def print_panel(result: ScenarioResult, number: int, total: int, console: Console) -> None:
    console.print(build_panel(result, number, total))


def print_summary(report: DemoReport, console: Console) -> None:
    from rich.text import Text

    console.print()
    console.print(build_summary(report))
    console.print()
    console.print(Text(format_outcome(report), style="bold green" if report.passed else "bold red"))
    if report.dataset_kept:
        console.print(Text(f"The generated datasets are kept in {report.dataset_dir}."))
    if report.passed:
        console.print(
            Text(
                "Next: `from loaderdoctor import DataLoader` in your training script gives every "
                "worker failure a verdict like these; `loaderdoctor env` checks this machine."
            )
        )


def print_report(report: DemoReport, console: Console) -> None:
    """The whole terminal rendering at once (``demo`` itself streams it panel by panel)."""
    print_intro(console, report.images, report.batch_size, report.num_workers)
    total = len(report.scenarios)
    for number, result in enumerate(report.scenarios, start=1):
        print_panel(result, number, total, console)
    print_summary(report, console)


def print_text(report: DemoReport, file: IO[str] | None = None) -> None:
    with terminal(file) as console:
        print_report(report, console)


def format_text(report: DemoReport, width: int = 100) -> str:
    """The terminal rendering without colour, at a fixed width: what tests and logs compare."""
    return render_plain(print_report, report, width)


def format_json(report: DemoReport) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"
