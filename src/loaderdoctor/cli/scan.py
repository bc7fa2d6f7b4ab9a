"""Fetch every sample of a dataset (or image folder) in isolated workers and quarantine the bad ones."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from loaderdoctor.cli import CommandError, ExitCode


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "spec",
        metavar="SPEC",
        help="path/to/file.py:NAME, package.module:NAME, or a folder of images",
    )
    parser.add_argument(
        "--num-workers", type=int, default=2, metavar="N", help="worker processes (default 2)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds one sample may take before it counts as a hang (default 60)",
    )
    parser.add_argument(
        "--out",
        default="quarantine.json",
        metavar="PATH",
        help="quarantine file to write with every bad index (default quarantine.json)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def load(spec: str) -> Any:
    """The dataset behind SPEC: an image folder, or a spec that ``spec.load_dataset`` resolves."""
    if os.path.isdir(spec):
        from loaderdoctor.scan.images import ImageFolderScan

        images = ImageFolderScan(spec)
        if not len(images):
            raise CommandError(f"no image files under {spec}")
        return images
    if ":" not in spec:
        raise CommandError(f"no such folder: {spec} (or give a dataset spec, path/to/file.py:NAME)")
    from loaderdoctor.spec import SpecError, load_dataset

    try:
        dataset = load_dataset(spec)
    except SpecError as error:
        raise CommandError(str(error)) from None
    dataset = getattr(dataset, "dataset", dataset) if hasattr(dataset, "batch_sampler") else dataset
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise CommandError(
            f"{spec} is an iterable-style dataset; scan needs __getitem__ and __len__"
        )
    return dataset


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on stderr with rate and ETA; None when stderr is not a terminal."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("scanning"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TextColumn("[progress.data.speed]{task.fields[rate]}"),
        TimeRemainingColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    )
    task = bar.add_task("scan", total=None, rate="")

    def update(done: int, total: int) -> None:
        speed = bar.tasks[0].speed
        bar.update(task, completed=done, total=total, rate=f"{speed:.0f}/s" if speed else "")

    with bar:
        yield update


def run(args: argparse.Namespace) -> int:
    if args.num_workers < 1:
        raise CommandError(
            "--num-workers must be at least 1 (each sample needs an isolated worker)"
        )
    if args.timeout <= 0:
        raise CommandError("--timeout must be a positive number of seconds")
    dataset = load(args.spec)
    from loaderdoctor.report.scan import format_json, print_text
    from loaderdoctor.scan import quarantine_entries, scan_dataset
    from loaderdoctor.supervise.quarantine import write_quarantine

    with progress_bar(sys.stderr.isatty()) as progress:
        report = scan_dataset(
            dataset,
            spec=args.spec,
            num_workers=args.num_workers,
            timeout=args.timeout,
            progress=progress,
        )
    written: str | None = None
    # A clean scan leaves no file behind, but replaces a stale one from an earlier scan.
    if report.bad or os.path.exists(args.out):
        try:
            write_quarantine(args.out, quarantine_entries(report))
        except OSError as error:
            raise CommandError(f"cannot write quarantine file {args.out}: {error}") from None
        written = args.out
    if args.json:
        sys.stdout.write(format_json(report))
    else:
        print_text(report, sys.stdout, quarantine_path=written)
    return ExitCode.FINDINGS if report.bad else ExitCode.OK
