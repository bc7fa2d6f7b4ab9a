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
    parser.add_argument("--html", metavar="PATH", help="also write the report as one HTML file")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.epilog = (
        "Scale out with torchrun: torchrun --nproc_per_node=N -m loaderdoctor scan SPEC shards "
        "the indices across ranks; rank 0 prints the merged report and writes the files. "
        "Exit status: 0 clean, 1 bad samples found, 2 usage error, 130 interrupted (rerun with "
        "--resume); under torchrun 0 whenever the scan completes, as torchrun takes any other "
        "status for a failed rank."
    )


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
    from loaderdoctor.scan.shard import JoinError, current_shard
    from loaderdoctor.units import parse_size

    if args.num_workers < 1:
        raise CommandError(
            "--num-workers must be at least 1 (each sample needs an isolated worker)"
        )
    if args.timeout <= 0:
        raise CommandError("--timeout must be a positive number of seconds")
    if args.checkpoint_every <= 0:
        raise CommandError("--checkpoint-every must be a positive number of seconds")
    mem_limit = None
    if args.mem_limit is not None:
        try:
            mem_limit = parse_size(args.mem_limit)
        except ValueError as error:
            raise CommandError(f"--mem-limit: {error}") from None
        if mem_limit < MIN_MEM_LIMIT:
            raise CommandError("--mem-limit must be at least 32M: a worker needs that to start")
    shard = current_shard()
    dataset = load(args.spec)
    if len(dataset) == 0:
        raise CommandError(f"{args.spec} has no samples (its len() is 0): nothing to scan")
    checkpoints = Checkpoints(args.checkpoint or default_checkpoint(args.out), shard)
    resume = checkpoints.resume(args.spec, len(dataset)) if args.resume else None
    if resume is None:
        checkpoints.refuse_to_overwrite()
    # Fail now, not after an hour of scanning, when a result could not be written.
    for path in (args.out, checkpoints.mine, args.html):
        if path is not None:
            ensure_writable(path)
    from loaderdoctor.report.scan import format_json, print_text
    from loaderdoctor.scan import quarantine_entries, scan_dataset
    from loaderdoctor.supervise.quarantine import write_quarantine

    try:
        with stop_on_sigterm(), progress_bar(sys.stderr.isatty() and shard.is_leader) as progress:
            report = scan_dataset(
                dataset,
                spec=args.spec,
                num_workers=args.num_workers,
                timeout=args.timeout,
                mem_limit=mem_limit,
                progress=progress,
                checkpoint=checkpoints.mine,
                checkpoint_every=args.checkpoint_every,
                resume=resume,
                shard=shard,
            )
    except JoinError as error:
        raise CommandError(str(error)) from None
    except KeyboardInterrupt:
        print(
            f"loaderdoctor scan: interrupted; progress saved in {checkpoints.mine}: "
            "run the same command with --resume to continue",
            file=sys.stderr,
        )
        return ExitCode.INTERRUPTED
    if not shard.is_leader:
        checkpoints.remove(every_rank=False)  # rank 0 has this rank's results now
        return ExitCode.OK  # rank 0 reports for every rank
    written: str | None = None
    # A clean scan leaves no file behind, but replaces a stale one from an earlier scan.
    if report.bad or os.path.exists(args.out):
        try:
            write_quarantine(args.out, quarantine_entries(report))
        except OSError as error:
            raise CommandError(f"cannot write quarantine file {args.out}: {error}") from None
        written = args.out
    if args.html:
        from loaderdoctor.report.scan_html import write_html

        try:
            write_html(report, args.html)
        except OSError as error:
            raise CommandError(f"cannot write {args.html}: {error.strerror}") from None
    checkpoints.remove(every_rank=True)  # the results are written: nothing left to resume
    if args.json:
        sys.stdout.write(format_json(report))
    else:
        print_text(report, sys.stdout, quarantine_path=written)
    if shard.world_size > 1:
        # torchrun reports any non-zero exit as a failed rank, with a traceback of its own; the
        # findings are in the report and the quarantine file.
        return ExitCode.OK
    return ExitCode.FINDINGS if report.bad else ExitCode.OK


MIN_MEM_LIMIT = 32 << 20


def ensure_writable(path: str) -> None:
    """A file can be created beside ``path`` (its folder is made if missing), or one clear error."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise CommandError(f"cannot write {path}: {error.strerror or error}") from None


def default_checkpoint(out: str) -> str:
    """``quarantine.json`` -> ``quarantine.checkpoint.json``, beside it."""
    root, _ = os.path.splitext(out)
    return f"{root}.checkpoint.json"


class Checkpoints:
    """The checkpoint files of a scan: one, or one per torchrun rank (``PATH.rank<N>``)."""

    def __init__(self, path: str, shard: Any) -> None:
        self.path = path
        self.mine = path if shard.world_size == 1 else f"{path}.rank{shard.rank}"

    def existing(self) -> list[str]:
        import glob

        ranks = sorted(glob.glob(glob.escape(self.path) + ".rank*"))
        return [p for p in [self.path, *ranks] if os.path.isfile(p)]

    def resume(self, spec: str, total: int) -> Any:
        """Every checkpoint's samples merged (ranks' files included), or a one-line error."""
        from loaderdoctor.scan.state import CheckpointError, ScanState, load_checkpoint

        found = self.existing()
        if not found:
            raise CommandError(f"--resume: no checkpoint at {self.path}; nothing to resume")
        state = ScanState(spec, total)
        for path in found:
            try:
                state.merge(load_checkpoint(path, spec, total))
            except CheckpointError as error:
                raise CommandError(str(error)) from None
        return state

    def refuse_to_overwrite(self) -> None:
        """An interrupted scan's progress is never thrown away without being asked to."""
        found = self.existing()
        if found:
            raise CommandError(
                f"an interrupted scan left {found[0]}: pass --resume to continue it, "
                "or delete it to start over"
            )

    def remove(self, every_rank: bool) -> None:
        """A completed scan needs no checkpoint: remove this rank's (rank 0: everyone's)."""
        for path in self.existing() if every_rank else [self.mine]:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """SIGTERM (a scheduler, ``kill``) stops the scan like Ctrl-C: the checkpoint is saved."""
    import signal

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
