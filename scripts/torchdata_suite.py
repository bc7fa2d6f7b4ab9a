"""Run torchdata's own StatefulDataLoader suite stock, with loaderdoctor's swapped in, and under run.

The suite is torchdata's ``test/stateful_dataloader/`` (``test_state_dict.py``,
``test_sampler.py``, ``test_incremental_state.py``, ``test_hugging_face.py``,
``test_dataloader.py``) at the tag of the torchdata release under test (``v0.11.0`` for 0.11.0); it
is not part of this repository (never copy it in): fetch it from meta-pytorch/data and pass its
directory. It needs ``expecttest``, ``parameterized`` and ``datasets`` in the venv that runs it.

Three runs, each its own ``python -m pytest`` (machinery shared with scripts/torch_suite.py in
scripts/suite_compare.py): stock; "ours", with a directory first on PYTHONPATH whose
``sitecustomize`` makes ``torchdata.stateful_dataloader.StatefulDataLoader`` (under both of its
module names) ``loaderdoctor.StatefulDataLoader`` in every process; and "run", the suite unmodified
under ``loaderdoctor run -- python -m pytest`` (its report is summed up below the counts). Every
test that failed on one side only runs again, alone, on both sides (--reruns times); a test that
fails with ours (or under run) every time and passes stock every time is a difference.

Exit status: 0 when both ours and run have stock's failures only, 1 when either has others, 2 for
bad arguments or a suite that cannot be collected.

Example (torchdata 0.11.0 in .venv, its tests fetched to /tmp/td-suite/):
  .venv/bin/python scripts/torchdata_suite.py /tmp/td-suite --jobs 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from suite_compare import (
    Comparison,
    Runner,
    Side,
    UsageError,
    add_run_options,
    check_reported,
    format_comparison,
    load_average,
    parse_arguments,
    prepare_workdir,
    probe_swap,
    swap_sitecustomize,
)

SUITE_FILES = (
    "test_state_dict.py",
    "test_sampler.py",
    "test_incremental_state.py",
    "test_hugging_face.py",
    "test_dataloader.py",
)

SWAP_SITECUSTOMIZE = swap_sitecustomize(
    "torchdata_suite.py",
    "torchdata's StatefulDataLoader is loaderdoctor's here",
    """\\
import torchdata.stateful_dataloader
import torchdata.stateful_dataloader.stateful_dataloader

import loaderdoctor

torchdata.stateful_dataloader.StatefulDataLoader = loaderdoctor.StatefulDataLoader
torchdata.stateful_dataloader.stateful_dataloader.StatefulDataLoader = (
    loaderdoctor.StatefulDataLoader
)
""",
)

SWAP_PROBE = (
    "import torchdata.stateful_dataloader as s, torchdata.stateful_dataloader.stateful_dataloader "
    "as m, loaderdoctor as l, torchdata; "
    "print(s.StatefulDataLoader is l.StatefulDataLoader is m.StatefulDataLoader, "
    "s.StatefulDataLoader.__module__, torchdata.__version__)"
)


def suite_files(given: Path) -> tuple[Path, ...]:
    """The suite's files in ``given`` (torchdata's test/stateful_dataloader directory)."""
    files = tuple(given / name for name in SUITE_FILES if (given / name).is_file())
    if not given.is_dir() or not files:
        raise UsageError(
            f"{given}: no {SUITE_FILES[0]} there; fetch torchdata's test/stateful_dataloader "
            "at the release's tag first"
        )
    return files


def run_report_summary(report_path: Path) -> list[str]:
    """What the run side's ``report.json`` says of the loaders it saw."""
    if not report_path.is_file():
        return [f"run report: none at {report_path}"]
    report = json.loads(report_path.read_text())
    supervised = sum(rank.get("loaders", 0) for rank in report.get("ranks", []))
    lines = [
        f"run report: status {report.get('status')}, {len(report.get('incidents', []))} "
        f"incident(s), {supervised} supervised DataLoader(s) iterated"
    ]
    lines += [f"  note: {note}" for note in report.get("notes", [])]
    return lines


def compare(options: argparse.Namespace) -> tuple[list[Comparison], list[str]]:
    files = suite_files(Path(options.suite).resolve())
    workdir, swap_dir = prepare_workdir(options.keep, "torchdata-suite.", SWAP_SITECUSTOMIZE)
    stock_side = Side("stock")
    sides = [
        Side("ours", {"PYTHONPATH": str(swap_dir)}),
        Side("run", prefix=(options.python, "-m", "loaderdoctor", "run", "--report-dir",
                            "report_dir", "--")),
    ]  # fmt: skip
    version = probe_swap(options.python, sides[0], SWAP_PROBE, "loaderdoctor.StatefulDataLoader")[
        -1
    ]
    runner = Runner(
        options.python, files, workdir, options.per_test_timeout, tuple(options.pytest_args)
    )
    tests = [str(file) for file in files]
    load_before = load_average()
    results = {}
    for side in (stock_side, *sides):
        print(f"torchdata_suite: {side.name} run (torchdata {version}) ...", file=sys.stderr)
        results[side.name] = runner.run(
            side, tests, side.name, jobs=options.jobs, timeout=options.timeout
        )
        hint = f"are expecttest, parameterized and datasets installed for {options.python}?"
        check_reported(results[side.name], side.name, workdir, hint)
    summary = run_report_summary(workdir / "run.report" / "report.json")
    comparisons = []
    for side in sides:
        rechecks = runner.recheck(
            stock_side, results["stock"], side, results[side.name], options.reruns
        )
        comparisons.append(
            Comparison(
                str(files[0].parent),
                version,
                results["stock"],
                results[side.name],
                rechecks,
                load_before,
                load_average(),
                title="torchdata's StatefulDataLoader suite",
                library="torchdata",
                label=side.name,
            )
        )
    if options.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return comparisons, summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="\n\n".join((__doc__ or "").split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("suite", help="torchdata's test/stateful_dataloader directory")
    add_run_options(parser, timeout=3600)
    options = parse_arguments(parser, argv)
    try:
        comparisons, summary = compare(options)
    except UsageError as error:
        print(f"torchdata_suite: {error}", file=sys.stderr)
        return 2
    print("\n\n".join(format_comparison(comparison) for comparison in comparisons))
    print("\n" + "\n".join(summary))
    return 0 if all(comparison.same_failures for comparison in comparisons) else 1


if __name__ == "__main__":
    sys.exit(main())
