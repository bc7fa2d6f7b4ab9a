"""Fetch every sample of a dataset (or image folder) in isolated workers and quarantine the bad ones."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from loaderdoctor.cli import CommandError, ExitCode

if TYPE_CHECKING:
    from loaderdoctor.scan.job import ScanJob
    from loaderdoctor.scan.model import ScanReport


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
    parser.add_argument(
        "--mem-limit",
        metavar="SIZE",
        help="memory cap per worker (e.g. 2G): a sample that needs more is OOM-killed and "
        "quarantined, alone (default: no cap)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted scan from its checkpoint; samples already scanned are "
        "not fetched again",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="where the scan saves its progress (default: beside --out, NAME.checkpoint.json); "
        "removed when the scan completes",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds between checkpoint saves (default 10)",
    )
    _register_ray(parser)
    parser.add_argument("--html", metavar="PATH", help="also write the report as one HTML file")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.epilog = (
        "Scale out with torchrun: torchrun --nproc_per_node=N -m loaderdoctor scan SPEC shards "
        "the indices across ranks; rank 0 prints the merged report and writes the files. "
        "Exit status: 0 clean, 1 bad samples found, 2 usage error, 130 interrupted or the Ray "
        "cluster lost (rerun with --resume); under torchrun 0 whenever the scan completes, as torchrun takes any other "
        "status for a failed rank."
    )


def _register_ray(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="scan on a Ray cluster (HOST:PORT of its head; without one, RAY_ADDRESS's "
        "cluster, else Ray started here): shards of the indices as Ray tasks, each sample "
        "still isolated on its node; needs pip install 'loaderdoctor[ray]'",
    )
    parser.add_argument(
        "--shard-size",
        type=int,
        metavar="N",
        help="with --ray: samples per Ray task (default: from the cluster's CPUs)",
    )


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on stderr with rate and ETA where stderr is a terminal; elsewhere (a
    log, ``| tee``, nohup) a line every 10 s (``report.progress``); None when not ``enabled``."""
    if not enabled:
        yield None
        return
    if not sys.stderr.isatty():
        from loaderdoctor.report.progress import ProgressLines

        yield ProgressLines("scanning", "samples", sys.stderr).update
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


def _scan(job: ScanJob, leader: bool) -> ScanReport | None:
    """The report, or None when interrupted (the checkpoint saved; what to do is printed)."""
    from loaderdoctor.scan.cluster import ClusterLost

    try:
        with progress_bar(leader) as progress:
            return job.scan(progress)
    except KeyboardInterrupt:
        print(
            f"loaderdoctor scan: interrupted; progress saved in {job.checkpoints.mine}: "
            "run the same command with --resume to continue",
            file=sys.stderr,
        )
        return None
    except ClusterLost as error:
        raise CommandError(
            f"{error}; every finished shard is saved in {job.checkpoints.mine}: run the "
            "same command with --resume to continue",
            ExitCode.INTERRUPTED,
        ) from None


def run(args: argparse.Namespace) -> int:
    from loaderdoctor.scan.job import ScanRequest, ScanUsageError, prepare
    from loaderdoctor.units import parse_size

    mem_limit = None
    if args.mem_limit is not None:
        try:
            mem_limit = parse_size(args.mem_limit)
        except ValueError as error:
            raise CommandError(f"--mem-limit: {error}") from None
    request = ScanRequest(
        spec=args.spec,
        num_workers=args.num_workers,
        timeout=args.timeout,
        out=args.out,
        mem_limit=mem_limit,
        resume=args.resume,
        checkpoint=args.checkpoint,
        checkpoint_every=args.checkpoint_every,
        html=args.html,
        ray=args.ray,
        shard_size=args.shard_size,
    )
    try:
        job = prepare(request)
        leader = job.shard.is_leader
        report = _scan(job, leader)
        if report is None:
            return ExitCode.INTERRUPTED
        if not leader:
            job.finish()  # rank 0 has this rank's results now, and reports for every rank
            return ExitCode.OK
        written = job.write_quarantine(report)
    except ScanUsageError as error:
        raise CommandError(str(error)) from None
    if args.html:
        from loaderdoctor.report.html.scan import write_html

        try:
            write_html(report, args.html)
        except OSError as error:
            raise CommandError(f"cannot write {args.html}: {error.strerror}") from None
    return _show(args, job, report, written)


def _show(args: argparse.Namespace, job: ScanJob, report: ScanReport, written: str | None) -> int:
    """The report on stdout, then the checkpoint removed, then the exit status."""
    from loaderdoctor.report.scan import format_json, print_text
    from loaderdoctor.scan.findings import length_hint

    if args.json:
        sys.stdout.write(format_json(report))
    else:
        print_text(report, sys.stdout, quarantine_path=written)
    sys.stdout.flush()
    # Last, once every result is written and the report shown: a scan killed before this point
    # (a failed write included) keeps its checkpoint, and --resume shows its report again.
    job.finish()
    wrong_length = length_hint(report)
    if wrong_length is not None:  # the dataset is wrong, not its samples: the user's to fix
        print(f"loaderdoctor scan: error: {wrong_length}", file=sys.stderr)
        return ExitCode.USAGE
    if job.shard.world_size > 1:
        # torchrun reports any non-zero exit as a failed rank, with a traceback of its own; the
        # findings are in the report and the quarantine file.
        return ExitCode.OK
    return ExitCode.FINDINGS if report.bad else ExitCode.OK
