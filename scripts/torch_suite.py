"""Run PyTorch's own DataLoader suite twice, stock and with loaderdoctor.DataLoader swapped in.

The suite is PyTorch's ``test/test_dataloader.py`` of the torch release under test; it is not part
of this repository (never copy it in): fetch it from PyTorch's repository at that release and pass
its path. It imports ``torch.testing._internal.common_utils``, which the torch wheel ships and which
needs ``expecttest`` (``pip install expecttest`` in the venv that runs it).

Each run is its own ``python -m pytest`` process (``-n JOBS --dist loadscope``, a timeout per test
and one for the whole run; the process group is killed at the end, so no worker outlives it). The
"ours" run puts a directory first on PYTHONPATH whose ``sitecustomize`` makes
``torch.utils.data.DataLoader`` and ``torch.utils.data.dataloader.DataLoader`` loaderdoctor's before
anything else imports them: the suite's ``from torch.utils.data import DataLoader``, its
``torch.utils.data.DataLoader(...)`` calls, its spawned subprocesses and ``python -c`` children all
get ours. Then every test that failed on one side only runs again, alone, on both sides (--reruns
times): a test that fails with ours every time and passes stock every time is a difference, the
rest are flakes of a loaded machine, and both are listed.

Prints a table (passed / failed / errors / skipped per side) and the verdict: "ours has stock's
failures only", or the tests that fail only with ours. Exit status: 0 when ours has stock's
failures only, 1 when it has others, 2 for bad arguments or a suite that cannot be collected.

Example (torch 2.13.0 in .venv, the suite fetched to /tmp/suite/test_dataloader.py):
  .venv/bin/python scripts/torch_suite.py /tmp/suite/test_dataloader.py
Another torch (its venv needs pytest, pytest-xdist, pytest-timeout, expecttest, loaderdoctor):
  PYTHONPATH=$PWD/src scripts/torch_suite.py --python /work/venv2141/bin/python SUITE
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from suite_compare import (
    Comparison,
    Recheck,
    Runner,
    RunResult,
    Side,
    UsageError,
    add_run_options,
    check_reported,
    format_comparison,
    load_average,
    parse_arguments,
    parse_junit,
    prepare_workdir,
    probe_swap,
    swap_sitecustomize,
)

SIDES = ("stock", "ours")

# Put first on PYTHONPATH for the "ours" side: swaps the class under both of torch's names.
SWAP_SITECUSTOMIZE = swap_sitecustomize(
    "torch_suite.py",
    "torch's DataLoader is loaderdoctor's here",
    """\
import torch.utils.data
import torch.utils.data.dataloader

import loaderdoctor

torch.utils.data.DataLoader = loaderdoctor.DataLoader
torch.utils.data.dataloader.DataLoader = loaderdoctor.DataLoader
""",
)

# What the "ours" interpreter must answer before the suite runs: the swap took.
SWAP_PROBE = (
    "import torch.utils.data as d, torch.utils.data.dataloader as m, loaderdoctor as l; "
    "print(d.DataLoader is l.DataLoader and m.DataLoader is l.DataLoader, "
    "d.DataLoader.__module__, __import__('torch').__version__)"
)


def compare(options: argparse.Namespace) -> Comparison:
    suite = Path(options.suite).resolve()
    if not suite.is_file():
        raise UsageError(
            f"{options.suite}: no such file; fetch PyTorch's test/test_dataloader.py first"
        )
    workdir, swap_dir = prepare_workdir(options.keep, "torch-suite.", SWAP_SITECUSTOMIZE)
    stock_side = Side("stock")
    ours_side = Side("ours", {"PYTHONPATH": str(swap_dir)})
    torch_version = probe_swap(options.python, ours_side, SWAP_PROBE, "loaderdoctor.DataLoader")[-1]
    # test_proper_exit and the other @slowTest ones
    slow = {"PYTORCH_TEST_WITH_SLOW": "1"} if options.slow else {}
    runner = Runner(
        options.python,
        (suite,),
        workdir,
        options.per_test_timeout,
        tuple(options.pytest_args),
        slow,
    )
    load_before = load_average()
    results = {}
    for side in (stock_side, ours_side):
        print(
            f"torch_suite: {side.name} run of {suite} (torch {torch_version}) ...", file=sys.stderr
        )
        results[side.name] = runner.run(
            side, [str(suite)], side.name, jobs=options.jobs, timeout=options.timeout
        )
        check_reported(
            results[side.name], side.name, workdir, f"is expecttest installed for {options.python}?"
        )
    stock, ours = results["stock"], results["ours"]
    rechecks = runner.recheck(stock_side, stock, ours_side, ours, options.reruns)
    if options.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return Comparison(str(suite), torch_version, stock, ours, rechecks, load_before, load_average())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="\n\n".join((__doc__ or "").split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("suite", help="path to PyTorch's test/test_dataloader.py")
    add_run_options(parser, timeout=1500)
    parser.add_argument(
        "--slow", action="store_true",
        help="also run the suite's @slowTest tests (test_proper_exit: minutes more)",
    )  # fmt: skip
    options = parse_arguments(parser, argv)
    try:
        comparison = compare(options)
    except UsageError as error:
        print(f"torch_suite: {error}", file=sys.stderr)
        return 2
    print(format_comparison(comparison))
    return 0 if comparison.same_failures else 1


__all__ = ["Comparison", "Recheck", "RunResult", "format_comparison", "main", "parse_junit"]

if __name__ == "__main__":
    sys.exit(main())
