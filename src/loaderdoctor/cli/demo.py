"""See loaderdoctor at work: plant real faults in a small image dataset and show each verdict."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from loaderdoctor.cli import CommandError, ExitCode
from loaderdoctor.demo import SCENARIOS

if TYPE_CHECKING:
    from loaderdoctor.demo import DemoReport, Scenario, ScenarioResult


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keep",
        metavar="DIR",
        help="write the generated datasets into DIR (new or empty) and keep them",
    )
    names = [scenario.name for scenario in SCENARIOS]
    parser.add_argument(
        "--scenario",
        action="append",
        choices=names,
        metavar="NAME",
        help=f"run only this scenario (repeatable): {', '.join(names)}",
    )
    parser.add_argument(
        "--heal",
        action="store_true",
        help="load with heal=True: each epoch finishes, the culprit is skipped or quarantined",
    )
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    parser.epilog = (
        "Exit status: 0 every planted fault got its verdict (and, with --heal, every epoch "
        "finished), 1 one did not, 2 a usage error (--keep DIR not empty)."
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console

    from loaderdoctor.demo import run_demo
    from loaderdoctor.demo.scenarios import BATCH_SIZE, IMAGES, NUM_WORKERS, check_keep
    from loaderdoctor.report import demo as render

    if args.keep is not None:  # before the intro: an error comes first, and alone
        try:
            check_keep(Path(args.keep))
        except FileExistsError as error:
            raise CommandError(str(error)) from None
    console = Console()
    if not args.json:
        render.print_intro(console, IMAGES, BATCH_SIZE, NUM_WORKERS)
    with Console(stderr=True).status("loaderdoctor demo", spinner="dots") as status:

        def progress(number: int, total: int, scenario: Scenario) -> None:
            status.update(
                f"loaderdoctor demo [{number}/{total}] {scenario.name}, "
                f"expecting {scenario.expected_cause}"
            )

        def on_result(number: int, total: int, result: ScenarioResult) -> None:
            if not args.json:  # each verdict as soon as it is in
                status.stop()  # the spinner is on stderr: clear it before writing to stdout
                render.print_panel(result, number, total, console)
                status.start()

        try:
            report: DemoReport = run_demo(
                keep=args.keep,
                names=args.scenario,
                progress=progress,
                on_result=on_result,
                heal=args.heal,
            )
        except FileExistsError as error:
            raise CommandError(str(error)) from None
    if args.json:
        sys.stdout.write(render.format_json(report))
    else:
        render.print_summary(report, console)
    return ExitCode.OK if report.passed else ExitCode.FINDINGS
