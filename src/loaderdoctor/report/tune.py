"""Renderers for ``loaderdoctor tune``: the recommended snippet, JSON, and a rich summary."""

from __future__ import annotations

import json
from typing import IO, TYPE_CHECKING

from loaderdoctor.report.console import render_plain, terminal
from loaderdoctor.tune.model import Trial, TuneReport
from loaderdoctor.units import format_bytes, format_mib, format_seconds

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

WIDE = 120  # a pipe or a file gets room for the table (rich would squeeze it into 80 columns)


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
    data = report.to_dict()
    nothing_fits = format_nothing_fits(report)
    data["snippet"] = format_snippet(report) if nothing_fits is None else None
    if nothing_fits is not None:
        data["nothing_fits"] = nothing_fits
    return json.dumps(data, indent=2) + "\n"


def format_nothing_fits(report: TuneReport) -> str | None:
    """What replaces the recommendation when nothing was measured (None when a configuration
    was): past the budget, the budget and what the smallest configuration needs; else why
    nothing was measured and the fix that follows (``bounds.NOTHING_MEASURED``). A pick that
    failed its soak (over the budget, or a failure) is not recommended either."""
    if report.soak is not None and report.soak.note is not None:
        return (
            f"nothing passed every check: {report.recommended.label()}, the pick of the trials, "
            f"stopped in its soak ({report.soak.note}); raise --mem-budget, or lower "
            "--batch-size, or tune with fewer --max-workers"
        )
    if any(trial.ok for trial in report.trials):
        return None
    bound = report.bound
    if (
        bound.id == "nothing-measured"
        and not report.skipped
        and not any(trial.over_budget for trial in report.trials)
    ):
        fix = " ".join(bound.fixes)
        return f"{bound.title}; {fix[:1].lower()}{fix[1:]}"
    needs = [(s.predicted_bytes, s.config.label()) for s in report.skipped if s.predicted_bytes]
    needs += [(t.total_peak_bytes, t.config.label()) for t in report.trials if t.total_peak_bytes]
    text = f"nothing fits the memory budget of {format_bytes(report.budget.memory_bytes)}"
    if needs:
        need, label = min(needs)
        text += f": the smallest configuration ({label}) needs about {format_bytes(need)}"
    return text + "; raise --mem-budget, or lower --batch-size or the dataset's memory"


def format_summary(report: TuneReport) -> str:
    """One line: what was walked, in how long, and why it stopped."""
    return (
        f"ran {len(report.trials)} trials ({len({t.config for t in report.trials})} configurations of the "
        f"{report.grid_size}-configuration grid) in {format_seconds(report.seconds)}; "
        f"{report.stop_reason}"
    )


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
        format_mib(trial.main_peak_bytes),
        format_mib(per_worker) if per_worker is not None else "-",
        format_mib(trial.total_peak_bytes),
        format_mib(trial.shm_peak_bytes),
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


def print_text(report: TuneReport, file: IO[str] | None = None) -> None:
    """Settings, the trials table, the bound, start-up, soak, notes and the recommended snippet."""
    import sys

    stream = file if file is not None else sys.stdout
    with terminal(stream, width=None if stream.isatty() else WIDE, soft_wrap=True) as console:
        print_report(report, console)


def format_text(report: TuneReport, width: int = WIDE) -> str:
    return render_plain(print_report, report, width, soft_wrap=True)


def print_report(report: TuneReport, console: Console) -> None:
    from rich.markup import escape

    shm = format_bytes(report.budget.shm_bytes) if report.budget.shm_bytes is not None else "?"
    console.print(
        escape(
            f"tune {report.spec}: batch_size {report.batch_size}, {report.usable_cores} usable "
            f"cores, workers up to {report.max_workers}, memory budget "
            f"{format_bytes(report.budget.memory_bytes)} ({report.budget.source}), "
            f"shm budget {shm}"
        )
    )
    console.print(escape(format_summary(report)))
    console.print(_trials_table(report))
    nothing_fits = format_nothing_fits(report)
    if nothing_fits is None:
        console.print("* the recommended configuration")
    for number, trial in enumerate(report.trials, 1):
        if trial.note:
            console.print(escape(f"trial {number} ({trial.config.label()}): {trial.note}"))
    if report.skipped:
        console.print("not run (over budget):")
        for skipped in report.skipped:
            console.print(escape(f"  {skipped.config.label()}: {skipped.reason}"))
    _print_bound(report, console)
    if report.soak is not None:
        print_soak(report, console)
    for note in report.notes:
        console.print(escape(f"note: {note}"))
    if nothing_fits is not None:
        console.print(escape(nothing_fits))
        return
    console.print(
        escape(f"recommended ({report.recommended_samples_per_s:.0f} samples/s steady state):")
    )
    console.print(escape(format_snippet(report)), end="")


def _trials_table(report: TuneReport) -> Table:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

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
    fits = format_nothing_fits(report) is None
    for trial in report.trials:
        config = trial.config
        chosen = fits and (config.num_workers, config.prefetch_factor, config.pin_memory) == (
            base.num_workers,
            base.prefetch_factor,
            base.pin_memory,
        )
        table.add_row(*(escape(cell) for cell in trial_row(trial, chosen)))
    return table


def _print_bound(report: TuneReport, console: Console) -> None:
    from rich.markup import escape

    bound = report.bound
    if bound.id == "nothing-measured":  # no rate, so no bound: the title says why
        console.print(escape(bound.title))
    else:
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


def print_soak(report: TuneReport, console: Console) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    assert report.soak is not None
    soak = report.soak
    table = Table(
        title="soak", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False
    )
    for column in ("epoch", "samples/s", "start-up s", "seconds", "main MiB", "per worker MiB"):
        table.add_column(column)
    for epoch in soak.epochs:
        workers = " ".join(format_mib(b) for b in epoch.worker_peak_bytes) or "-"
        table.add_row(
            str(epoch.epoch),
            f"{epoch.samples_per_s:.0f}",
            f"{epoch.startup_s:.2f}",
            f"{epoch.seconds:.1f}",
            format_mib(epoch.main_peak_bytes),
            workers,
        )
    console.print(table)
    growth = ", ".join(format_mib(g, signed=True, decimals=1) for g in soak.worker_growth_bytes)
    console.print(
        escape(
            f"soak: {soak.mean_samples_per_s:.0f} samples/s mean, cv {soak.cv:.1%}; "
            f"growth first->last epoch: main "
            f"{format_mib(soak.main_growth_bytes, signed=True, decimals=1)} MiB, "
            f"per worker [{growth or '-'}] MiB"
        )
    )
    if soak.note:
        console.print(escape(f"soak stopped: {soak.note}"))
