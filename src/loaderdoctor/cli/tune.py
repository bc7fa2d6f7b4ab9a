"""Find the fastest num_workers / prefetch_factor / persistent_workers that fit the memory budget."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from loaderdoctor.cli import CommandError, ExitCode


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "spec", metavar="SPEC", help="the dataset: path/to/file.py:NAME or package.module:NAME"
    )
    parser.add_argument(
        "--batch-size", type=int, required=True, metavar="N", help="batch size to tune for"
    )
    parser.add_argument(
        "--collate", metavar="FILE.py:NAME", help="the collate_fn to use (default_collate if not)"
    )
    parser.add_argument(
        "--quarantine",
        metavar="FILE",
        help="leave out the samples of this quarantine file (from loaderdoctor scan --out FILE), "
        "as DataLoader(quarantine=FILE) does",
    )
    parser.add_argument(
        "--max-workers",
        type=int,
        metavar="N",
        help="most workers to try (default: 16, or 2 per usable core when that is more)",
    )
    parser.add_argument(
        "--mem-budget",
        metavar="SIZE",
        help="memory the loader may use in all, e.g. 6G or 512M (default: the cgroup or "
        "host limit minus a margin)",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds the search may take (default 300)",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=1.5,
        metavar="S",
        help="steady-state seconds measured per configuration (default 1.5)",
    )
    parser.add_argument(
        "--soak",
        type=int,
        default=0,
        metavar="EPOCHS",
        help="then run the chosen configuration for EPOCHS epochs: stability and memory growth",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--plot",
        metavar="PATH",
        help="write throughput and memory against workers (.html, .svg, .png)",
    )
    parser.epilog = (
        "Exit status: 0 a configuration is recommended, 1 none fits the memory budget (or the "
        "pick, and the one tried after it, stopped in their --soak), 2 a "
        "usage error (a SPEC that does not load, a dataset that fails: see loaderdoctor scan)."
    )


def _validate(args: argparse.Namespace) -> int | None:
    """Every check that needs no dataset; returns the memory budget in bytes (or None)."""
    if args.batch_size < 1:
        raise CommandError("--batch-size must be at least 1")
    if args.max_workers is not None and args.max_workers < 0:
        raise CommandError("--max-workers must be 0 or more")
    if not (math.isfinite(args.time_budget) and args.time_budget > 0):
        raise CommandError("--time-budget must be a positive number of seconds")
    if not (math.isfinite(args.window) and args.window > 0):
        raise CommandError("--window must be a positive number of seconds")
    if args.soak < 0:
        raise CommandError("--soak must be 0 or more epochs")
    if args.plot is not None:
        from loaderdoctor.report.html.tune_plot import PLOT_SUFFIXES

        if not args.plot.lower().endswith(PLOT_SUFFIXES):
            raise CommandError(f"--plot takes a {', '.join(PLOT_SUFFIXES)} file, not {args.plot}")
    if args.mem_budget is None:
        return None
    from loaderdoctor.units import parse_size

    try:
        return parse_size(args.mem_budget)
    except ValueError as error:
        raise CommandError(f"--mem-budget: {error}") from None


def load(spec: str, collate: str | None) -> tuple[Any, Callable[..., Any] | None]:
    if ":" not in spec:
        raise CommandError(f"{spec} is not a dataset spec: expected path/to/file.py:NAME")
    from loaderdoctor.spec import SpecError, load_dataset, load_object

    try:
        dataset: Any = load_dataset(spec)
        collate_fn = load_object(collate, "collate") if collate is not None else None
    except SpecError as error:
        raise CommandError(str(error)) from None
    if collate_fn is not None and not callable(collate_fn):
        raise CommandError(f"{collate} is a {type(collate_fn).__name__}, not a function")
    if hasattr(dataset, "batch_sampler"):  # a DataLoader: tune its dataset
        collate_fn = collate_fn or getattr(dataset, "collate_fn", None)
        dataset = dataset.dataset
    if hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
        from loaderdoctor.spec import dataset_length

        try:
            dataset_length(dataset, spec)  # a __len__ that raises or lies is the user's to fix
        except SpecError as error:
            raise CommandError(str(error)) from None
    return dataset, collate_fn


def without_quarantined(dataset: Any, path: str) -> Any:
    """``dataset`` less the samples of the quarantine file at ``path`` (a ``Subset``)."""
    import os

    from torch.utils.data import Subset

    from loaderdoctor.supervise.parent.quarantine import QuarantineFileError, read_quarantine

    if not os.path.exists(path):
        raise CommandError(f"--quarantine {path}: no such file (loaderdoctor scan --out writes it)")
    if not os.path.isfile(path):  # a FIFO would block the read for ever
        raise CommandError(
            f"--quarantine {path}: not a regular file (loaderdoctor scan --out writes one)"
        )
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise CommandError(
            f"--quarantine needs a dataset with __len__ and __getitem__, not a "
            f"{type(dataset).__name__} (a stream has no indices to leave out)"
        )
    length = len(dataset)
    try:
        quarantined = read_quarantine(path, length)
    except QuarantineFileError as error:
        raise CommandError(str(error)) from None
    except RecursionError:  # json's parser on nesting deeper than Python's stack
        raise CommandError(
            f"--quarantine {path}: JSON nested too deeply to be a quarantine file"
        ) from None
    return Subset(dataset, [index for index in range(length) if index not in quarantined])


@contextmanager
def progress_bar() -> Iterator[Callable[[int, int, str], None] | None]:
    """A rich progress bar on stderr (trials done of planned, the configuration running) where
    stderr is a terminal; elsewhere (a log, ``| tee``) a line every 10 s (``report.progress``)."""
    if not sys.stderr.isatty():
        from loaderdoctor.report.progress import ProgressLines

        yield ProgressLines("tuning", "trials", sys.stderr).update
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("tuning"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=Console(file=sys.stderr),
        transient=True,
    )
    task = bar.add_task("", total=None)

    def update(done: int, planned: int, label: str) -> None:
        bar.update(task, completed=done, total=max(planned, done), description=label)

    with bar:
        yield update


def run(args: argparse.Namespace) -> int:
    memory_budget = _validate(args)
    dataset, collate_fn = load(args.spec, args.collate)
    if args.quarantine is not None:
        dataset = without_quarantined(dataset, args.quarantine)
    from loaderdoctor.tune import DatasetError, tune_dataset

    with progress_bar() as progress:
        try:
            report = tune_dataset(
                dataset,
                spec=args.spec,
                batch_size=args.batch_size,
                collate_fn=collate_fn,
                collate=args.collate,
                max_workers=args.max_workers,
                memory_budget=memory_budget,
                time_budget_s=args.time_budget,
                window_s=args.window,
                soak_epochs=args.soak,
                progress=progress,
            )
        except DatasetError as error:
            raise CommandError(
                f"the dataset or collate_fn fails in the main process: {error} "
                f"(loaderdoctor scan {args.spec} --out quarantine.json names the bad samples; "
                "then tune with --quarantine quarantine.json)"
            ) from None
    if args.plot is not None:
        from loaderdoctor.report.html.tune_plot import write_plot

        try:
            write_plot(report, args.plot)
        except OSError as error:
            raise CommandError(f"cannot write {args.plot}: {error}") from None
    from loaderdoctor.report.tune import format_json, format_nothing_fits, print_text

    if args.json:
        sys.stdout.write(format_json(report))
    else:
        print_text(report, sys.stdout)
        if args.plot is not None:
            print(f"plot written to {args.plot}")
    nothing_fits = format_nothing_fits(report)
    if nothing_fits is not None:
        print(f"loaderdoctor tune: {nothing_fits}", file=sys.stderr)
        return ExitCode.FINDINGS
    return ExitCode.OK
