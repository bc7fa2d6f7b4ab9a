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
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

SIDES = ("stock", "ours")
OUTCOMES = ("passed", "failed", "error", "skipped")

# Put first on PYTHONPATH for the "ours" side. Runs the sitecustomize it hides (a venv's or a
# distribution's), as Python would have, then swaps the class under both of torch's names.
SWAP_SITECUSTOMIZE = '''\
"""Written by loaderdoctor's scripts/torch_suite.py: torch's DataLoader is loaderdoctor's here."""
import importlib.machinery as _machinery
import os as _os
import sys as _sys

_here = _os.path.realpath(_os.path.dirname(_os.path.abspath(__file__)))
_rest = [p for p in _sys.path if _os.path.realpath(p or _os.getcwd()) != _here]
_spec = _machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:
    _hidden = type(_sys)("sitecustomize")
    _hidden.__file__ = _spec.origin
    _spec.loader.exec_module(_hidden)

import torch.utils.data
import torch.utils.data.dataloader

import loaderdoctor

torch.utils.data.DataLoader = loaderdoctor.DataLoader
torch.utils.data.dataloader.DataLoader = loaderdoctor.DataLoader
'''

# What the "ours" interpreter must answer before the suite runs: the swap took.
SWAP_PROBE = (
    "import torch.utils.data as d, torch.utils.data.dataloader as m, loaderdoctor as l; "
    "print(d.DataLoader is l.DataLoader and m.DataLoader is l.DataLoader, "
    "d.DataLoader.__module__, __import__('torch').__version__)"
)


class UsageError(Exception):
    """Bad arguments or an environment the suite cannot run in: one line, exit status 2."""


@dataclass(frozen=True)
class RunResult:
    """One pytest run: each test's outcome by node id, and how the run itself ended."""

    outcomes: dict[str, str]
    messages: dict[str, str]
    seconds: float
    timed_out: bool
    returncode: int

    def count(self, outcome: str) -> int:
        return sum(1 for value in self.outcomes.values() if value == outcome)

    def failing(self) -> set[str]:
        return {test for test, value in self.outcomes.items() if value in ("failed", "error")}


@dataclass(frozen=True)
class Recheck:
    """A test that failed on one side only, run again alone on both sides."""

    test: str
    failed_first_with: str
    stock_failures: int
    ours_failures: int
    reruns: int
    message: str

    @property
    def verdict(self) -> str:
        if self.failed_first_with == "ours":
            if self.ours_failures == self.reruns and self.stock_failures == 0:
                return "differs"
        elif self.stock_failures == self.reruns and self.ours_failures == 0:
            return "differs"
        return "flaky"


@dataclass(frozen=True)
class Comparison:
    """Both runs and the re-runs of what failed on one side only."""

    suite: str
    torch_version: str
    stock: RunResult
    ours: RunResult
    rechecks: list[Recheck] = field(default_factory=list)
    load_before: float = 0.0
    load_after: float = 0.0

    def differences(self) -> list[Recheck]:
        return [
            r for r in self.rechecks if r.failed_first_with == "ours" and r.verdict == "differs"
        ]

    def only_stock(self) -> list[Recheck]:
        return [
            r for r in self.rechecks if r.failed_first_with == "stock" and r.verdict == "differs"
        ]

    def flakes(self) -> list[Recheck]:
        return [r for r in self.rechecks if r.verdict == "flaky"]

    def missing(self) -> list[str]:
        """Tests one run reports and the other does not (a run cut short by its timeout)."""
        return sorted(set(self.stock.outcomes) ^ set(self.ours.outcomes))

    @property
    def same_failures(self) -> bool:
        complete = not (self.stock.timed_out or self.ours.timed_out or self.missing())
        return complete and not self.differences()


def parse_junit(path: Path, suite: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Each test's outcome and first message line by pytest node id, from a junit-xml file."""
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        # classname "test_dataloader.TestDataLoader" -> "<suite>::TestDataLoader::test_x"
        dotted = case.get("classname", "").split(".")
        classes = dotted[dotted.index(suite.stem) + 1 :] if suite.stem in dotted else dotted[-1:]
        parts = [str(suite), *classes, case.get("name", "")]
        test = "::".join(part for part in parts if part)
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = (child.get("message") or child.text or "").strip().splitlines()[:1]
                message = message[0] if message else ""
                break
        # A test whose body failed and whose teardown failed too is one failed test.
        if test not in outcomes or outcomes[test] == "passed":
            outcomes[test] = outcome
            messages[test] = message
    return outcomes, messages


def _load() -> float:
    return os.getloadavg()[0]


def _environment(side: str, swap_dir: Path, slow: bool) -> dict[str, str]:
    env = dict(os.environ)
    if side == "ours":
        env["PYTHONPATH"] = os.pathsep.join(
            [str(swap_dir)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
    if slow:
        env["PYTORCH_TEST_WITH_SLOW"] = "1"  # test_proper_exit and the other @slowTest ones
    env.setdefault("PYTHONFAULTHANDLER", "1")
    return env


def _run_killing_group(
    command: list[str], env: dict[str, str], log: Path, timeout: float
) -> tuple[int, bool]:
    """Run ``command`` in a process group of its own, output to ``log``; kill the whole group at
    the end (on time or not), so that no DataLoader worker or spawned child outlives the run."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        timed_out = False
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            returncode = -signal.SIGKILL
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
    return returncode, timed_out


def run_pytest(
    python: str,
    side: str,
    tests: Sequence[str],
    workdir: Path,
    name: str,
    *,
    swap_dir: Path,
    jobs: int,
    per_test_timeout: int,
    timeout: float,
    slow: bool,
    extra: Sequence[str],
) -> RunResult:
    junit = workdir / f"{name}.xml"
    command = [
        python, "-m", "pytest", *tests,
        "-c", str(workdir / "pytest.ini"), "--rootdir", str(Path(tests[0].split("::")[0]).parent),
        "-p", "no:cacheprovider", "-q", "-rfE", f"--junit-xml={junit}",
        f"--timeout={per_test_timeout}",
    ]  # fmt: skip
    if jobs > 0:
        command += ["-n", str(jobs), "--dist", "loadscope"]
    command += list(extra)
    started = time.monotonic()
    returncode, timed_out = _run_killing_group(
        command, _environment(side, swap_dir, slow), workdir / f"{name}.log", timeout
    )
    seconds = time.monotonic() - started
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    if junit.exists():
        outcomes, messages = parse_junit(junit, Path(tests[0].split("::")[0]))
    return RunResult(outcomes, messages, seconds, timed_out, returncode)


def compare(options: argparse.Namespace) -> Comparison:
    suite = Path(options.suite).resolve()
    if not suite.is_file():
        raise UsageError(
            f"{options.suite}: no such file; fetch PyTorch's test/test_dataloader.py first"
        )
    workdir = (
        Path(tempfile.mkdtemp(prefix="torch-suite.")) if options.keep is None else options.keep
    )
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "pytest.ini").write_text("[pytest]\n")  # none of ours or the suite's dir's config
    swap_dir = workdir / "swap"
    swap_dir.mkdir(exist_ok=True)
    (swap_dir / "sitecustomize.py").write_text(SWAP_SITECUSTOMIZE)
    probe = subprocess.run(
        [options.python, "-c", SWAP_PROBE],
        env=_environment("ours", swap_dir, False),
        capture_output=True,
        text=True,
        timeout=300,
    )
    answer = probe.stdout.split()
    if probe.returncode != 0 or answer[:1] != ["True"]:
        last = (probe.stderr.strip().splitlines() or [probe.stdout.strip()])[-1]
        raise UsageError(
            f"{options.python} cannot swap loaderdoctor.DataLoader in ({last}); "
            "is loaderdoctor importable there (pip install -e . or PYTHONPATH=src)?"
        )
    torch_version = answer[-1]
    common = dict(
        swap_dir=swap_dir,
        per_test_timeout=options.per_test_timeout,
        slow=options.slow,
        extra=options.pytest_args,
    )
    tests = [str(suite)]
    load_before = _load()
    results = {}
    for side in SIDES:
        print(f"torch_suite: {side} run of {suite} (torch {torch_version}) ...", file=sys.stderr)
        results[side] = run_pytest(
            options.python, side, tests, workdir, side,
            jobs=options.jobs, timeout=options.timeout, **common,
        )  # fmt: skip
        if not results[side].outcomes:
            log = workdir / f"{side}.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise UsageError(
                f"the {side} run reported no test ({' '.join(tail) or 'no output'}); "
                f"its log is {log} (is expecttest installed for {options.python}?)"
            )
    stock, ours = results["stock"], results["ours"]
    one_sided = [(t, "ours") for t in sorted(ours.failing() - stock.failing())]
    one_sided += [(t, "stock") for t in sorted(stock.failing() - ours.failing())]
    rechecks = []
    for number, (test, failed_with) in enumerate(one_sided):
        failures = {"stock": 0, "ours": 0}
        for attempt in range(options.reruns):
            for side in SIDES:
                rerun = run_pytest(
                    options.python, side, [test], workdir, f"rerun-{number}-{side}-{attempt}",
                    jobs=0, timeout=options.per_test_timeout + 120, **common,
                )  # fmt: skip
                failures[side] += int(test in rerun.failing() or not rerun.outcomes)
        first = (ours if failed_with == "ours" else stock).messages.get(test, "")
        rechecks.append(
            Recheck(test, failed_with, failures["stock"], failures["ours"], options.reruns, first)
        )
    if options.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return Comparison(str(suite), torch_version, stock, ours, rechecks, load_before, _load())


def format_comparison(comparison: Comparison) -> str:
    stock, ours = comparison.stock, comparison.ours
    lines = [
        f"PyTorch's DataLoader suite: {comparison.suite}",
        f"torch {comparison.torch_version}; load average {comparison.load_before:.1f} before, "
        f"{comparison.load_after:.1f} after",
        "",
        f"| {'run':5} | {'passed':>6} | {'failed':>6} | {'errors':>6} | {'skipped':>7} | {'time':>7} |",
        f"|{'-' * 7}|{'-' * 8}|{'-' * 8}|{'-' * 8}|{'-' * 9}|{'-' * 9}|",
    ]
    for side, result in (("stock", stock), ("ours", ours)):
        time_text = f"{result.seconds:.0f} s" + ("!" if result.timed_out else "")
        lines.append(
            f"| {side:5} | {result.count('passed'):6} | {result.count('failed'):6} | "
            f"{result.count('error'):6} | {result.count('skipped'):7} | {time_text:>7} |"
        )
    for side, result in (("stock", stock), ("ours", ours)):
        if result.timed_out:
            lines.append(f"the {side} run was killed at its timeout: its counts are partial")
    both = sorted(stock.failing() & ours.failing())
    lines += ["", f"failing on both sides (stock's own failures): {len(both)}"]
    lines += [f"  {test}: {stock.messages.get(test, '')}" for test in both]
    reruns = comparison.rechecks[0].reruns if comparison.rechecks else 0
    for title, group in (
        ("fail only with ours, on every re-run too", comparison.differences()),
        ("fail only with stock, on every re-run too", comparison.only_stock()),
        ("failed on one side once, not on its re-runs (flaky under load)", comparison.flakes()),
    ):
        lines += ["", f"{title}: {len(group)}"]
        for recheck in group:
            lines.append(
                f"  {recheck.test} (first failed with {recheck.failed_first_with}; re-runs: "
                f"stock failed {recheck.stock_failures}/{reruns}, ours {recheck.ours_failures}/"
                f"{reruns}): {recheck.message}"
            )
    if comparison.missing():
        lines += ["", f"reported by one run only: {len(comparison.missing())}"]
        lines += [f"  {test}" for test in comparison.missing()]
    lines.append("")
    if comparison.same_failures:
        lines.append("verdict: ours has stock's failures only")
    elif comparison.differences():
        lines.append(
            f"verdict: ours fails {len(comparison.differences())} test(s) that stock passes"
        )
    else:
        lines.append("verdict: incomplete (a run timed out or left tests out); see above")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="\n\n".join((__doc__ or "").split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("suite", help="path to PyTorch's test/test_dataloader.py")
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter with torch (default: this one)"
    )
    parser.add_argument(
        "--jobs", type=int, default=2, help="pytest-xdist processes; 0 for one (default 2)"
    )
    parser.add_argument(
        "--timeout", type=float, default=1500, help="seconds for each whole run (default 1500)"
    )
    parser.add_argument(
        "--per-test-timeout", type=int, default=300, help="seconds for one test (default 300)"
    )
    parser.add_argument(
        "--reruns", type=int, default=1,
        help="re-runs, on each side, of a test that failed on one side only (default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--slow", action="store_true",
        help="also run the suite's @slowTest tests (test_proper_exit: minutes more)",
    )  # fmt: skip
    parser.add_argument("--keep", type=Path, help="keep junit-xml and logs in this directory")
    parser.usage = "%(prog)s [options] SUITE [-- PYTEST_ARGS ...]"
    arguments = list(sys.argv[1:] if argv is None else argv)
    cut = arguments.index("--") if "--" in arguments else len(arguments)
    options = parser.parse_args(arguments[:cut])
    options.pytest_args = arguments[cut + 1 :]  # after --: more pytest arguments (-k ...)
    if options.reruns < 1 or options.jobs < 0:
        parser.error("--reruns must be at least 1 and --jobs at least 0")
    try:
        comparison = compare(options)
    except UsageError as error:
        print(f"torch_suite: {error}", file=sys.stderr)
        return 2
    print(format_comparison(comparison))
    return 0 if comparison.same_failures else 1


if __name__ == "__main__":
    sys.exit(main())
