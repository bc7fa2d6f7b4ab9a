"""Show the report of an earlier `loaderdoctor run` or `scan` again and rewrite its HTML page."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loaderdoctor.cli import CommandError, ExitCode

if TYPE_CHECKING:
    from loaderdoctor.runner.model import RunReport


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "report_dir",
        nargs="?",
        type=Path,
        default=Path("loaderdoctor-report"),
        metavar="PATH",
        help=(
            "a run's report folder or its report.json (default ./loaderdoctor-report), "
            "a multi-node run's folder (its node folders are merged into one job report), "
            "or a scan's JSON (loaderdoctor scan --json > scan.json)"
        ),
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead")
    parser.epilog = (
        "Exit status: 0 the run succeeded (healed or not) or the scan found no bad sample; 1 the "
        "run's command failed or a DataLoader raised, or its end is unknown (the run still goes "
        "on, or was killed before its command ended), or the scan found bad samples; 2 no such "
        "report. A folder left by a run that did not finish gets its report.json, made from what "
        "the run left (its .incidents/ folder then removed); a live run's folder is shown as it "
        "stands, and left alone."
    )
    parser.add_argument(
        "--no-html",
        action="store_true",
        help="do not rewrite report.html (or a scan's page: NAME.html beside NAME.json)",
    )


def scan_json(path: Path) -> dict[str, Any] | None:
    """The file's JSON if it is a scan report (it has ``bad`` and ``outliers``), else None."""
    if path.is_dir():
        return None
    from loaderdoctor.inputfile import load_json

    try:
        data = load_json(path)
    except FileNotFoundError:
        return None  # the run report's loader says what is missing
    except (OSError, ValueError) as error:
        raise CommandError(f"cannot read {path}: {error}") from None
    if isinstance(data, dict) and "bad" in data and "outliers" in data:
        return data
    return None


def run(args: argparse.Namespace) -> int:
    data = scan_json(args.report_dir)
    if data is not None:
        return rerender_scan(args, data)
    from loaderdoctor.runner.core import RunUsageError, write_report
    from loaderdoctor.runner.job import JobReportError, load_run_or_job, node_folders

    live = None
    if args.report_dir.is_dir():
        for node in node_folders(args.report_dir):  # each node's run, settled in its folder
            settle_run_folder(node)
        live = settle_run_folder(args.report_dir)
    try:
        report, merged = (live, False) if live is not None else load_run_or_job(args.report_dir)
    except (RunUsageError, JobReportError) as error:
        raise CommandError(str(error)) from None
    folder = args.report_dir if args.report_dir.is_dir() else args.report_dir.parent
    report.report_dir = str(folder.resolve())
    if merged:  # the job's report.json beside its node folders, as a run's is in its folder
        try:
            write_report(report, folder)
        except OSError as error:
            print(f"loaderdoctor report: report.json not written: {error}", file=sys.stderr)
    html = None
    if not args.no_html and live is None:  # a live run writes its own page when it ends
        from loaderdoctor.cli.run import write_html_report

        html = write_html_report(report, "report")
    from loaderdoctor.report.run_text import format_json, print_text

    if args.json:
        sys.stdout.write(format_json(report))
    else:
        print_text(report, html=html)
    # A healed run whose command succeeded is a success: 1 only where the command failed or a
    # DataLoader raised.
    return ExitCode.FINDINGS if report.status == "crashed" else ExitCode.OK


def settle_run_folder(folder: Path) -> RunReport | None:
    """A run folder's unmerged records made into its report: a run that did not finish gets
    its report.json, made from what it left (``.incidents/`` then removed); a live run's
    report so far is returned (nothing written)."""
    from loaderdoctor.runner.journal import live_run, settle, snapshot, unfinished_report
    from loaderdoctor.runner.protocol import LOCK_NAME

    if not (folder / LOCK_NAME).exists():  # no run of this loaderdoctor wrote here: as it is
        return None
    if live_run(folder):
        return snapshot(folder)
    try:
        taken = settle(folder)
    except OSError as error:
        taken = unfinished_report(folder)
        print(
            f"loaderdoctor report: report.json not written in {folder} "
            f"({error.strerror or error}); shown from the run's records",
            file=sys.stderr,
        )
        return taken
    return None


def rerender_scan(args: argparse.Namespace, data: dict[str, Any]) -> int:
    """The scan's summary and tables (or JSON), and its page next to its JSON, named after it
    (``scan2.json`` -> ``scan2.html``: another scan's page is not overwritten)."""
    from loaderdoctor.report.output import printable
    from loaderdoctor.report.scan import format_json, print_text
    from loaderdoctor.scan.model import ScanReport

    path: Path = args.report_dir
    try:
        report = ScanReport.from_dict(data)
    except (TypeError, ValueError, KeyError) as error:
        raise CommandError(f"{path} is not a loaderdoctor scan report: {error}") from None
    html = None
    if not args.no_html:
        from loaderdoctor.report.html.scan import write_html

        page = path.with_suffix(".html")
        try:
            html = write_html(report, page)
        except OSError as error:  # the JSON is there: say it, as a run's report.html does
            print(f"loaderdoctor report: {page.name} not written: {error}", file=sys.stderr)
    if args.json:
        sys.stdout.write(format_json(report))
    else:
        print_text(report)
        if html is not None:
            print(printable(f"report: {html}")[0])
    return ExitCode.FINDINGS if report.bad else ExitCode.OK
