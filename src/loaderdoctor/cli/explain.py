"""Name the likely causes of a failed run from its log or error message alone (file or stdin)."""

from __future__ import annotations

import argparse
import sys

from loaderdoctor.cli import CommandError, ExitCode


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "logfile", nargs="?", metavar="LOGFILE", help="the log of the failed run (default: stdin)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.epilog = (
        "Exit status: 0 a likely cause named, 1 none recognised, 2 an unreadable LOGFILE."
    )


def run(args: argparse.Namespace) -> int:
    from loaderdoctor.forensics.symptoms import explain_text
    from loaderdoctor.report.explain import format_json, format_text

    if args.logfile in (None, "-"):
        if sys.stdin.isatty():
            print("loaderdoctor explain: paste the error, then Ctrl-D", file=sys.stderr)
        text = sys.stdin.read()
    else:
        try:
            with open(args.logfile, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError as error:
            raise CommandError(f"cannot read {args.logfile}: {error.strerror or error}") from None
    explanation = explain_text(text)
    sys.stdout.write(format_json(explanation) if args.json else format_text(explanation))
    return ExitCode.OK if explanation.causes else ExitCode.FINDINGS
