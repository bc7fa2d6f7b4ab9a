"""Watch the loaders of a job running under `loaderdoctor run`, read-only, from another terminal."""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from loaderdoctor.cli import CommandError, ExitCode

if TYPE_CHECKING:
    from loaderdoctor.top.watch import Watcher


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        nargs="?",
        metavar="REPORT_DIR | PID",
        help=(
            "the job's --report-dir (a multi-node job's folder shows every node), or the pid of "
            "its training process (or of loaderdoctor run); default: the one job running"
        ),
    )
    parser.add_argument("--once", action="store_true", help="print one look as plain text, exit")
    parser.add_argument("--json", action="store_true", help="print one look as JSON, exit")
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="seconds between looks; the rates are over this long (default 1)",
    )
    parser.add_argument(
        "--hung-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="a worker in one stage this long is shown hung (default: the job's --hang-timeout)",
    )
    parser.add_argument(
        "--count", type=int, default=None, metavar="N", help="stop after N looks (default: never)"
    )
    parser.epilog = (
        "Nothing in the job changes because it is watched. Exit status: 0 detached (q, Ctrl-C, "
        "or the job ended); 2 no running job at REPORT_DIR or PID."
    )


def run(args: argparse.Namespace) -> int:
    from loaderdoctor.top.find import TopError, find_job
    from loaderdoctor.top.watch import Watcher

    if args.interval <= 0:
        raise CommandError("--interval must be more than 0 seconds")
    try:
        job = find_job(args.target)
    except TopError as error:
        raise CommandError(str(error)) from None
    watcher = Watcher(job, hang_after_s=args.hung_after)
    try:
        if args.once or args.json:
            from loaderdoctor.report.top import format_json, format_text

            snapshot = watcher.snapshot(args.interval)
            sys.stdout.write(format_json(snapshot) if args.json else format_text(snapshot))
            return ExitCode.OK
        if sys.stdout.isatty():
            return _live(watcher, args.interval, args.count)
        return _batch(watcher, args.interval, args.count)
    finally:
        watcher.close()


def _batch(watcher: Watcher, interval: float, count: int | None) -> int:
    """Not on a terminal: one plain-text look after another (``top -b``), a blank line apart."""
    from loaderdoctor.report.top import format_text

    looks = 0
    while count is None or looks < count:
        if looks:
            time.sleep(interval)
            sys.stdout.write("\n")
        sys.stdout.write(format_text(watcher.snapshot(interval)))
        sys.stdout.flush()
        looks += 1
        if not watcher.job.alive():
            print(f"the job has ended: loaderdoctor report {watcher.job.report_dir}")
            break
    return ExitCode.OK


def _live(watcher: Watcher, interval: float, count: int | None) -> int:
    """On a terminal: rich's live display, redrawn in place each look; ``q`` detaches."""
    from rich.console import Console
    from rich.live import Live

    from loaderdoctor.report.top import renderable

    looks = 0
    console = Console(highlight=False, emoji=False)
    with _keys() as pressed, Live(console=console, auto_refresh=False) as live:
        while count is None or looks < count:
            live.update(renderable(watcher.snapshot(interval)), refresh=True)
            looks += 1
            if not watcher.job.alive():
                console.print(f"the job has ended: loaderdoctor report {watcher.job.report_dir}")
                break
            if pressed(interval) == "q":
                break
    return ExitCode.OK


@contextlib.contextmanager
def _keys() -> Iterator[Callable[[float], str | None]]:
    """``pressed(timeout) -> key or None``, with the terminal in cbreak mode for the while."""
    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    if fd is None:

        def sleep(timeout: float) -> str | None:
            time.sleep(timeout)
            return None

        yield sleep
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)

    def read(timeout: float) -> str | None:
        ready, _, _ = select.select([fd], [], [], timeout)
        return os.read(fd, 1).decode(errors="replace").lower() if ready else None

    try:
        tty.setcbreak(fd)
        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
