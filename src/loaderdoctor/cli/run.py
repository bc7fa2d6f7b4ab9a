"""Run a training command with every DataLoader supervised; write a report of what happened."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from loaderdoctor.cli import CommandError

if TYPE_CHECKING:
    from loaderdoctor.runner.journal import Claim
    from loaderdoctor.runner.model import NodeInfo, RunReport

EARLIER_DIRNAME = "earlier"  # DIR/earlier/20261201-210843/report.json: a report a later run met


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds: {text}")
    return value


def _budget(text: str) -> str:
    from loaderdoctor.supervise.shared_failure import Budget

    try:
        Budget.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _deaths(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(
            f"a whole number of worker deaths, 1 or more, not {text!r}"
        )
    return count


def _healing_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--heal", action="store_true", help="skip or replace bad samples and respawn dead workers"
    )
    parser.add_argument(
        "--max-skipped",
        type=_budget,
        default=None,
        metavar="N",
        help="with --heal: stop and raise once more samples than this are skipped, a count or a "
        "fraction of the dataset (default 0.5)",
    )
    parser.add_argument(
        "--max-deaths-in-a-row",
        type=_deaths,
        default=None,
        metavar="N",
        help="with --heal: stop and raise once this many workers die one after another with no "
        "batch delivered between and no sample to blame (default 8)",
    )


def register(parser: argparse.ArgumentParser) -> None:
    parser.usage = (
        "loaderdoctor run [OPTIONS] -- COMMAND [ARGS...] | run [OPTIONS] SCRIPT.py [ARGS...]"
    )
    _healing_arguments(parser)
    parser.add_argument(
        "--hang-timeout",
        type=_seconds,
        default=300.0,
        metavar="S",
        help="kill a worker stuck on one sample this long and say where (default 300; 0: off)",
    )
    parser.add_argument(
        "--report-dir",
        type=Path,
        default=Path("loaderdoctor-report"),
        metavar="DIR",
        help="where report.json and report.html go (default ./loaderdoctor-report); an "
        "earlier run's report there moves to DIR/earlier/DATE-TIME/",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="raise instead of warning when a loader delivers wrong data without an error "
        "(a duplicated stream, the same shuffle every epoch, stale persistent workers, cloned "
        "random generators): for CI jobs",
    )
    parser.add_argument(
        "--json", action="store_true", help="print report.json to stderr instead of the summary"
    )
    parser.add_argument(
        "--memory-interval", type=_seconds, default=0.5, metavar="S", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "argv", nargs=argparse.REMAINDER, metavar="COMMAND", help="the command, or SCRIPT.py"
    )
    parser.epilog = (
        "Exit status: the command's own (128 + N after signal N); 2 for a usage error. "
        "report.json is written however the command ends. The command does not outlive run: "
        "should run be killed, the command writes the report and stops (SIGTERM), and what "
        "run knew is on disk for loaderdoctor report DIR. One run per report folder: a second "
        "run into a folder that a live run writes is refused (exit 2); a folder left by a run "
        "that did not finish is taken over, its report made from what that run left and kept "
        "in DIR/earlier/. A report folder that fills up or turns read-only mid-run is said in "
        "one warning line; the command's outcome and exit status stay its own."
    )


def run(args: argparse.Namespace) -> int:
    from loaderdoctor.runner.core import RunUsageError, outer_supervisor, resolve_command
    from loaderdoctor.runner.journal import claim
    from loaderdoctor.runner.node import node_of

    if args.max_skipped is not None and not args.heal:
        raise CommandError("--max-skipped is healing's budget: add --heal")
    if args.max_deaths_in_a_row is not None and not args.heal:
        raise CommandError("--max-deaths-in-a-row is healing's limit: add --heal")
    outer = outer_supervisor()
    if outer is not None:
        return _run_under(outer, args.argv)
    node = node_of(list(args.argv), os.environ, pid=os.getpid())
    report_dir = args.report_dir if node is None else args.report_dir / node.name
    try:
        resolve_command(args.argv)  # a typo is said before the folder is touched
        held = claim(report_dir.resolve(), report_dir)
    except RunUsageError as error:
        raise CommandError(str(error)) from None
    try:
        return _run_held(args, node, report_dir, held)
    finally:
        held.release()


def _run_held(
    args: argparse.Namespace, node: NodeInfo | None, report_dir: Path, held: Claim
) -> int:
    from loaderdoctor.runner.core import RunSettings, RunUsageError, run_command

    if node is not None:  # the job's earlier merged report no longer describes this job
        _say_kept(args.report_dir, keep_earlier_report(args.report_dir, racing=True))
    kept = keep_earlier_report(report_dir)
    if held.taken_over is not None:
        print(
            f"loaderdoctor run: an earlier run into {report_dir} did not finish; its report, "
            f"made from what it left, is kept in {kept or report_dir}",
            file=sys.stderr,
            flush=True,
        )
    else:
        _say_kept(report_dir, kept)
    settings = RunSettings(
        command=list(args.argv),
        report_dir=report_dir,
        node=node,
        heal=args.heal,
        max_skipped=args.max_skipped,
        max_deaths_in_a_row=args.max_deaths_in_a_row,
        strict=args.strict,
        hang_timeout_s=args.hang_timeout,
        memory_interval_s=max(args.memory_interval, 0.05),
    )
    try:
        report = run_command(settings)
    except RunUsageError as error:
        raise CommandError(str(error)) from None
    # A folder that could not take report.json (said once already) is not tried again
    html = write_html_report(report, "run") if not report.unwritten else None
    # The command's stdout stays its own: everything of ours goes to stderr.
    from loaderdoctor.report.run_text import format_json, print_text

    if args.json:
        sys.stderr.write(format_json(report))
    else:
        print_text(report, sys.stderr, html=html)
    return report.exit_code


def _run_under(outer: tuple[int, str], argv: list[str]) -> NoReturn:
    """``run -- run -- CMD``: one supervisor, one report. The inner run becomes CMD (exec)."""
    from loaderdoctor.runner.core import RunUsageError, exec_under_outer_supervisor, resolve_command

    pid, report_dir = outer
    try:
        command = resolve_command(argv)
        print(
            f"loaderdoctor run: already supervised by loaderdoctor run (pid {pid}); its report "
            f"in {report_dir} covers this command, with its options",
            file=sys.stderr,
            flush=True,
        )
        exec_under_outer_supervisor(command)
    except RunUsageError as error:
        raise CommandError(str(error)) from None


def _say_kept(report_dir: Path, kept: Path | None) -> None:
    if kept is not None:
        print(
            f"loaderdoctor run: the earlier report in {report_dir} is kept in {kept}",
            file=sys.stderr,
            flush=True,
        )


def keep_earlier_report(report_dir: Path, *, racing: bool = False) -> Path | None:
    """Move an earlier run's report out of the way, into ``DIR/earlier/<when it was written>``.

    ``DIR/report.json`` is always this run's (scripts read it there), and an earlier crash report
    is never replaced by a later run, not even by ``run -- ls``. Only the files a run writes move.
    ``racing``: the nodes of a job all move the job's report; the one that finds it gone already
    has nothing left to move.
    """
    from loaderdoctor.report.html.run import HTML_NAME
    from loaderdoctor.runner.protocol import REPORT_NAME

    earlier_json = report_dir / REPORT_NAME
    if not earlier_json.is_file():
        return None
    written = time.strftime("%Y%m%d-%H%M%S", time.localtime(earlier_json.stat().st_mtime))
    target = report_dir / EARLIER_DIRNAME / written
    number = 1
    while target.exists():
        number += 1
        target = report_dir / EARLIER_DIRNAME / f"{written}-{number}"
    try:
        target.mkdir(parents=True)
        for name in (REPORT_NAME, HTML_NAME):
            if (report_dir / name).is_file():
                (report_dir / name).rename(target / name)
    except OSError as error:
        if racing and not earlier_json.exists():
            return None
        raise CommandError(
            f"--report-dir {report_dir} holds an earlier report that cannot be moved to {target} "
            f"({error.strerror or error}): pass another --report-dir"
        ) from None
    return target


def write_html_report(report: RunReport, command: str) -> Path | None:
    """``DIR/report.html``; a failure to write it is said, not raised (report.json is there)."""
    from loaderdoctor.report.html.run import write_html

    try:
        return write_html(report, Path(report.report_dir))
    except OSError as error:
        print(f"loaderdoctor {command}: report.html not written: {error}", file=sys.stderr)
        return None
