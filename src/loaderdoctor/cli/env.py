"""Check this machine (and optionally a dataset) for what kills DataLoader workers."""

from __future__ import annotations

import argparse
import sys

from loaderdoctor.cli import CommandError, ExitCode


def _positive(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {number}")
    return number


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        metavar="SPEC",
        help="the dataset or DataLoader to measure: path/to/file.py:NAME or package.module:NAME "
        "(NAME may be a zero-argument function returning one)",
    )
    parser.add_argument("--batch-size", type=_positive, metavar="N")
    parser.add_argument(
        "--num-workers",
        type=_positive,
        metavar="N",
        help="default: the DataLoader's, else the usable cores",
    )
    parser.add_argument("--prefetch-factor", type=_positive, metavar="N", help="default: 2")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.epilog = (
        "Exit status: 0 every check passed (warnings allowed), 1 a check failed, 2 a usage "
        "error (a --target that does not load)."
    )


def run(args: argparse.Namespace) -> int:
    from loaderdoctor.env.core import run_env_checks
    from loaderdoctor.spec import SpecError

    if args.batch_size == 0:
        raise CommandError("--batch-size must be at least 1")
    try:
        report = run_env_checks(
            target=args.target,
            batch_size=args.batch_size,
            num_workers=args.num_workers,
            prefetch_factor=args.prefetch_factor,
        )
    except SpecError as error:
        raise CommandError(str(error)) from None
    from loaderdoctor.report.env import format_json, print_text

    if args.json:
        sys.stdout.write(format_json(report))
    else:
        print_text(report)
    return ExitCode.FINDINGS if report.failed else ExitCode.OK
