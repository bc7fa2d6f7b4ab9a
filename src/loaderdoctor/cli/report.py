"""Show the report of an earlier ``loaderdoctor run`` again and rewrite its report.html."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from loaderdoctor.cli import CommandError, ExitCode


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "report_dir",
        nargs="?",
        type=Path,
        default=Path("loaderdoctor-report"),
        metavar="DIR",
        help="the run's report folder, or its report.json (default ./loaderdoctor-report)",
    )
    parser.add_argument("--json", action="store_true", help="print report.json instead")
    parser.add_argument("--no-html", action="store_true", help="do not rewrite report.html")


def run(args: argparse.Namespace) -> int:
    from loaderdoctor.runner.core import RunUsageError, load_report

    try:
        report = load_report(args.report_dir)
    except RunUsageError as error:
        raise CommandError(str(error)) from None
    folder = args.report_dir if args.report_dir.is_dir() else args.report_dir.parent
    report.report_dir = str(folder.resolve())
    html = None
    if not args.no_html:
        from loaderdoctor.cli.run import write_html_report

        html = write_html_report(report, "report")
    if args.json:
        print(json.dumps(report.to_json(), indent=2, default=repr))
    else:
        from rich.console import Console

        from loaderdoctor.report.run_text import print_run_summary

        print_run_summary(report, html, Console())
    return ExitCode.OK if report.status == "ok" else ExitCode.FINDINGS
