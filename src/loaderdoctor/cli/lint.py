"""Check training scripts for DataLoader multiprocessing pitfalls, statically (LD1xx rules)."""

from __future__ import annotations

import argparse
import sys

from loaderdoctor.cli import CommandError, ExitCode
from loaderdoctor.lint import RULES, LintReport, check_paths
from loaderdoctor.lint.engine import is_valid_code
from loaderdoctor.report.lint import format_json, format_rules, format_text


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files and folders (.py, .ipynb)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    parser.add_argument("--select", metavar="CODES", help="comma list of codes or prefixes (LD10)")
    parser.add_argument("--ignore", metavar="CODES", help="comma list of codes or prefixes to skip")
    parser.add_argument(
        "--fix", action="store_true", help="rewrite files in place for the fixable rules"
    )
    parser.add_argument("--list-rules", action="store_true", help="print the rule catalog")


def _codes(option: str, value: str | None) -> list[str] | None:
    if value is None:
        return None
    codes = [code.strip().upper() for code in value.split(",") if code.strip()]
    for code in codes:
        if not is_valid_code(code):
            raise CommandError(
                f"{option}: {code!r} is not a rule code or prefix (like LD101, LD10)"
            )
    return codes


def run(args: argparse.Namespace) -> int:
    if args.list_rules:
        sys.stdout.write(format_rules(RULES))
        return ExitCode.OK
    if not args.paths:
        raise CommandError("give at least one PATH to lint (or --list-rules)")
    select = _codes("--select", args.select)
    ignore = _codes("--ignore", args.ignore)
    report: LintReport
    try:
        if args.fix:
            from loaderdoctor.lint.fix import fix_paths

            report = fix_paths(args.paths, select=select, ignore=ignore)
        else:
            report = check_paths(args.paths, select=select, ignore=ignore)
    except FileNotFoundError as error:
        raise CommandError(str(error)) from None
    if args.format == "json":
        sys.stdout.write(format_json(report))
    else:
        sys.stdout.write(format_text(report))
    return ExitCode.FINDINGS if report.findings else ExitCode.OK
