"""Renderers for ``loaderdoctor tune``: the recommended snippet, JSON, and a rich summary."""

from __future__ import annotations

import json
from typing import IO

from loaderdoctor.envchecks import human_bytes
from loaderdoctor.tune.model import Trial, TuneReport


def format_snippet(report: TuneReport) -> str:
    """The recommended ``DataLoader(...)`` call, valid Python."""
    lines = ["loader = DataLoader(", "    dataset,", f"    batch_size={report.batch_size},"]
    for name, value in report.recommended.kwargs().items():
        lines.append(f"    {name}={value!r},")
    if report.collate is not None:
        name = report.collate.rpartition(":")[2]
        lines.append(f"    collate_fn={name},  # from {report.collate}")
    lines.append(")")
    return "\n".join(lines) + "\n"


def format_json(report: TuneReport) -> str:
    data = report.to_json()
    data["snippet"] = format_snippet(report)
    return json.dumps(data, indent=2) + "\n"


def format_summary(report: TuneReport) -> str:
    """One line: what was walked, in how long, and why it stopped."""
    return (
        f"ran {len(report.trials)} trials ({len({t.config for t in report.trials})} configurations of the "
        f"{report.grid_size}-configuration grid) in {report.seconds:.1f} s; {report.stop_reason}"
    )


def _mib(count: int) -> str:
    return f"{count / 1024 / 1024:.0f}"


def trial_row(trial: Trial, recommended: bool) -> list[str]:
    config = trial.config
    per_worker = max(trial.worker_peak_bytes) if trial.worker_peak_bytes else None
    prefetch = "-" if config.prefetch_factor is None else str(config.prefetch_factor)
    return [
        ("*" if recommended else "") + str(config.num_workers),
        prefetch + (" pin" if config.pin_memory else ""),
        trial.phase,
        f"{trial.samples_per_s:.0f}" if trial.ok else "-",
        f"{trial.startup_s:.2f}",
        _mib(trial.main_peak_bytes),
        _mib(per_worker) if per_worker is not None else "-",
        _mib(trial.total_peak_bytes),
        _mib(trial.shm_peak_bytes),
        trial.status,
    ]


TRIAL_COLUMNS = (
    "workers",
    "prefetch",
    "phase",
    "samples/s",
    "start-up s",
    "main",
    "per worker",
    "total",
    "shm",
    "status",
)


def print_text(report: TuneReport, file: IO[str]) -> None:
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    # a pipe or a file gets room for the table (rich would squeeze it into 80 columns)
    width = None if file.isatty() else 120
    console = Console(file=file, highlight=False, soft_wrap=True, emoji=False, width=width)
    shm = human_bytes(report.budget.shm_bytes) if report.budget.shm_bytes is not None else "?"
    console.print(
        escape(
            f"tune {report.spec}: batch_size {report.batch_size}, {report.usable_cores} usable "
            f"cores, workers up to {report.max_workers}, memory budget "
            f"{human_bytes(report.budget.memory_bytes)} ({report.budget.source}), "
            f"shm budget {shm}"
        )
    )
    console.print(escape(format_summary(report)))
    base = report.recommended
    table = Table(
        title="measured: steady-state samples/s, start-up apart; peak memory in MiB",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
    )
    for column in TRIAL_COLUMNS:
        numeric = column not in ("prefetch", "phase", "status")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True)
    for trial in report.trials:
        config = trial.config
        chosen = (config.num_workers, config.prefetch_factor, config.pin_memory) == (
            base.num_workers,
            base.prefetch_factor,
            base.pin_memory,
        )
        table.add_row(*(escape(cell) for cell in trial_row(trial, chosen)))
    console.print(table)
    console.print("* the recommended configuration")
    for number, trial in enumerate(report.trials, 1):
        if trial.note:
            console.print(escape(f"trial {number} ({trial.config.label()}): {trial.note}"))
    if report.skipped:
        console.print("not run (over budget):")
        for skipped in report.skipped:
            console.print(escape(f"  {skipped.config.label()}: {skipped.reason}"))
    bound = report.bound
    console.print(escape(f"bound: {bound.id} - {bound.title}"))
    for line in bound.evidence:
        console.print(escape(f"  - {line}"))
    for fix in bound.fixes:
        console.print(escape(f"  fix: {fix}"))
    if report.startup is not None:
        start = report.startup
        persistent = f"{start.persistent_s:.2f} s" if start.persistent_s is not None else "?"
        console.print(
            escape(
                f"epoch start-up: {start.fresh_s:.2f} s with fresh workers, {persistent} with "
                f"persistent ones; {start.reason}"
            )
        )
    if report.soak is not None:
        print_soak(report, console)
    for note in report.notes:
        console.print(escape(f"note: {note}"))
    console.print(
        escape(f"recommended ({report.recommended_samples_per_s:.0f} samples/s steady state):")
    )
    console.print(escape(format_snippet(report)), end="")


def print_soak(report: TuneReport, console: object) -> None:
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    assert isinstance(console, Console) and report.soak is not None
    soak = report.soak
    table = Table(
        title="soak", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False
    )
    for column in ("epoch", "samples/s", "start-up s", "seconds", "main MiB", "per worker MiB"):
        table.add_column(column)
    for epoch in soak.epochs:
        workers = " ".join(_mib(b) for b in epoch.worker_peak_bytes) or "-"
        table.add_row(
            str(epoch.epoch),
            f"{epoch.samples_per_s:.0f}",
            f"{epoch.startup_s:.2f}",
            f"{epoch.seconds:.1f}",
            _mib(epoch.main_peak_bytes),
            workers,
        )
    console.print(table)
    growth = ", ".join(f"{g / 1024 / 1024:+.1f}" for g in soak.worker_growth_bytes) or "-"
    console.print(
        escape(
            f"soak: {soak.mean_samples_per_s:.0f} samples/s mean, cv {soak.cv:.1%}; "
            f"growth first->last epoch: main {soak.main_growth_bytes / 1024 / 1024:+.1f} MiB, "
            f"per worker [{growth}] MiB"
        )
    )
    if soak.note:
        console.print(escape(f"soak stopped: {soak.note}"))
