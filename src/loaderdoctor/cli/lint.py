"""Check training scripts for DataLoader multiprocessing pitfalls, statically (LD1xx rules)."""

from __future__ import annotations

import argparse
import os
import sys

from loaderdoctor.cli import CommandError, ExitCode
from loaderdoctor.lint import RULES, LintReport, check_paths
from loaderdoctor.lint.catalog import SEVERITIES
from loaderdoctor.lint.engine import is_valid_code
from loaderdoctor.lint.project import PLATFORMS
from loaderdoctor.report.lint import format_json, format_rules, format_sarif, format_text

_EPILOG = """\
A folder is linted as one project: a Dataset's base class in another module, the num_workers
of every DataLoader a Dataset is given to, and cv2.setNumThreads() in a setup module all count.
Exit status: 0 clean, 1 a finding at --fail-on or worse, 2 bad usage.

examples:
  loaderdoctor lint .                                  errors and warnings, for every platform
  loaderdoctor lint train.py --platform linux          spawn-only rules become warnings
  loaderdoctor lint src --format sarif > lint.sarif    for GitHub code scanning
  loaderdoctor lint . --severity info --fail-on error  show everything, fail on errors only
  loaderdoctor lint --list-rules                       the rule catalog
"""


def register(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files and folders (.py, .ipynb)")
    parser.add_argument(
        "--format", choices=("text", "json", "sarif"), default="text", help="output format"
    )
    parser.add_argument(
        "--platform",
        choices=PLATFORMS,
        default="all",
        help="where the code runs: spawn-only rules (LD101, LD102) are errors for windows, "
        "macos and all (the default), warnings for linux",
    )
    parser.add_argument(
        "--severity",
        choices=SEVERITIES,
        default="warning",
        help="show findings at this severity or worse (default: warning; info is hidden)",
    )
    parser.add_argument(
        "--fail-on",
        choices=(*SEVERITIES, "never"),
        default="warning",
        help="exit 1 when a shown finding is at this severity or worse (default: warning)",
    )
    parser.add_argument("--select", metavar="CODES", help="comma list of codes or prefixes (LD10)")
    parser.add_argument("--ignore", metavar="CODES", help="comma list of codes or prefixes to skip")
    parser.add_argument(
        "--fix", action="store_true", help="rewrite files in place for the fixable rules"
    )
    parser.add_argument("--list-rules", action="store_true", help="print the rule catalog")
    parser.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="print the findings only: no summary line, nothing at all when clean",
    )


def _codes(option: str, value: str | None) -> list[str] | None:
    if value is None:
        return None
    codes = [code.strip().upper() for code in value.split(",") if code.strip()]
    for code in codes:
        if not is_valid_code(code) or not any(rule.startswith(code) for rule in RULES):
            raise CommandError(
                f"{option}: {code!r} is not a rule code or prefix; the codes are "
                f"{', '.join(RULES)} (loaderdoctor lint --list-rules explains them)"
            )
    return codes


def run(args: argparse.Namespace) -> int:
    if args.list_rules:
        sys.stdout.write(format_rules(RULES))
        return ExitCode.OK
    if not args.paths:
        raise CommandError("give at least one PATH to lint (or --list-rules)")
    for path in args.paths:  # a FIFO or a device would block the read, or never end
        if os.path.exists(path) and not (os.path.isfile(path) or os.path.isdir(path)):
            raise CommandError(f"{path} is not a file or a folder of Python files")
    select = _codes("--select", args.select)
    ignore = _codes("--ignore", args.ignore)
    options = {"platform": args.platform, "min_severity": args.severity}
    report: LintReport
    try:
        if args.fix:
            from loaderdoctor.lint.fix import fix_paths

            report = fix_paths(args.paths, select=select, ignore=ignore, **options)
        else:
            report = check_paths(args.paths, select=select, ignore=ignore, **options)
    except FileNotFoundError as error:
        raise CommandError(str(error)) from None
    except OSError as error:  # unreadable (permissions, an I/O error): the user's to fix
        raise CommandError(f"cannot read {error.filename}: {error.strerror or error}") from None
    if args.format == "json":
        sys.stdout.write(format_json(report))
    elif args.format == "sarif":
        from loaderdoctor import __version__

        sys.stdout.write(format_sarif(report, RULES, __version__))
    else:
        sys.stdout.write(format_text(report, summary=not args.quiet))
    fail_on = None if args.fail_on == "never" else args.fail_on
    return ExitCode.FINDINGS if report.fails(fail_on) else ExitCode.OK
