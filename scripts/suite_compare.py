"""What scripts/torch_suite.py and scripts/torchdata_suite.py share: run a library's own pytest
suite on two sides (stock, and with loaderdoctor in), re-run alone what failed on one side only,
and report the counts and the tests that differ.

A side is an environment and a command prefix: the "ours" sides put a directory first on
PYTHONPATH whose ``sitecustomize`` swaps loaderdoctor's class in (``swap_sitecustomize``), the
"run" side starts pytest under ``loaderdoctor run``. Each run is its own ``python -m pytest``
process (a timeout per test and one for the whole run; the process group is killed at the end,
so no worker outlives it).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

OUTCOMES = ("passed", "failed", "error", "skipped")

# Runs the sitecustomize that the swap directory hides (a venv's or a distribution's), as Python
# would have, before the swap below it.
_SITECUSTOMIZE_HEAD = '''\
"""Written by loaderdoctor's scripts/{script}: {what}."""
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
'''


def swap_sitecustomize(script: str, what: str, swap: str) -> str:
    """A ``sitecustomize`` that runs the one it hides, then ``swap`` (Python source)."""
    return _SITECUSTOMIZE_HEAD.format(script=script, what=what) + "\n" + swap


class UsageError(Exception):
    """Bad arguments or an environment the suite cannot run in: one line, exit status 2."""


@dataclass(frozen=True)
class Side:
    """How one side runs pytest: extra environment, and a prefix before ``python -m pytest``
    (``report_dir`` in it is replaced by a directory of the run's own)."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    prefix: tuple[str, ...] = ()


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
        if self.failed_first_with == "stock":
            if self.stock_failures == self.reruns and self.ours_failures == 0:
                return "differs"
        elif self.ours_failures == self.reruns and self.stock_failures == 0:
            return "differs"
        return "flaky"


@dataclass(frozen=True)
class Comparison:
    """Both runs and the re-runs of what failed on one side only. ``label``: the other side's
    name in the report; ``title`` and ``library`` head it."""

    suite: str
    torch_version: str
    stock: RunResult
    ours: RunResult
    rechecks: list[Recheck] = field(default_factory=list)
    load_before: float = 0.0
    load_after: float = 0.0
    title: str = "PyTorch's DataLoader suite"
    library: str = "torch"
    label: str = "ours"

    def differences(self) -> list[Recheck]:
        return [
            r for r in self.rechecks if r.failed_first_with != "stock" and r.verdict == "differs"
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


def parse_junit(path: Path, suite: Path | Sequence[Path]) -> tuple[dict[str, str], dict[str, str]]:
    """Each test's outcome and first message line by pytest node id, from a junit-xml file of a
    run of ``suite`` (one file, or several: each test is named by the file it came from)."""
    files = {file.stem: file for file in ([suite] if isinstance(suite, Path) else suite)}
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        # classname "test_dataloader.TestDataLoader" -> "<suite>::TestDataLoader::test_x"
        dotted = case.get("classname", "").split(".")
        stem = next((part for part in dotted if part in files), None)
        if stem is None:
            if len(files) > 1:
                continue  # not a test of the suite's files
            (stem,) = files
            classes = dotted[-1:]
        else:
            classes = dotted[dotted.index(stem) + 1 :]
        parts = [str(files[stem]), *classes, case.get("name", "")]
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


def load_average() -> float:
    return os.getloadavg()[0]


def environment(side: Side, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with ``side``'s (a PYTHONPATH entry goes first) and ``extra``."""
    env = dict(os.environ)
    for name, value in side.env.items():
        if name == "PYTHONPATH":
            rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
            value = os.pathsep.join([value, *rest])
        env[name] = value
    env.update(extra or {})
    env.setdefault("PYTHONFAULTHANDLER", "1")
    return env


def run_killing_group(
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


@dataclass(frozen=True)
class Runner:
    """How every pytest run of one comparison is made (all but its side, tests and name)."""

    python: str
    suite: tuple[Path, ...]
    workdir: Path
    per_test_timeout: int
    extra: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    def run(
        self, side: Side, tests: Sequence[str], name: str, *, jobs: int, timeout: float
    ) -> RunResult:
        junit = self.workdir / f"{name}.xml"
        prefix = [
            str(self.workdir / f"{name}.report") if p == "report_dir" else p for p in side.prefix
        ]
        command = [
            *prefix, self.python, "-m", "pytest", *tests,
            "-c", str(self.workdir / "pytest.ini"), "--rootdir", str(self.suite[0].parent),
            "-p", "no:cacheprovider", "-q", "-rfE", f"--junit-xml={junit}",
            f"--timeout={self.per_test_timeout}",
        ]  # fmt: skip
        if jobs > 0:
            command += ["-n", str(jobs), "--dist", "loadscope"]
        command += list(self.extra)
        started = time.monotonic()
        returncode, timed_out = run_killing_group(
            command, environment(side, self.env), self.workdir / f"{name}.log", timeout
        )
        seconds = time.monotonic() - started
        outcomes: dict[str, str] = {}
        messages: dict[str, str] = {}
        if junit.exists():
            outcomes, messages = parse_junit(junit, self.suite)
        return RunResult(outcomes, messages, seconds, timed_out, returncode)

    def recheck(
        self, stock_side: Side, stock: RunResult, side: Side, ours: RunResult, reruns: int
    ) -> list[Recheck]:
        """Each test that failed on one side only, run again alone on both, ``reruns`` times."""
        one_sided = [(t, side.name) for t in sorted(ours.failing() - stock.failing())]
        one_sided += [(t, "stock") for t in sorted(stock.failing() - ours.failing())]
        rechecks = []
        for number, (test, failed_with) in enumerate(one_sided):
            failures = {"stock": 0, side.name: 0}
            for attempt in range(reruns):
                for each in (stock_side, side):
                    rerun = self.run(
                        each, [test], f"rerun-{side.name}-{number}-{each.name}-{attempt}",
                        jobs=0, timeout=self.per_test_timeout + 120,
                    )  # fmt: skip
                    failures[each.name] += int(test in rerun.failing() or not rerun.outcomes)
            first = (stock if failed_with == "stock" else ours).messages.get(test, "")
            rechecks.append(
                Recheck(test, failed_with, failures["stock"], failures[side.name], reruns, first)
            )
        return rechecks


def check_reported(result: RunResult, side: str, workdir: Path, hint: str) -> None:
    """A run that reported no test at all cannot be compared: say why, with its log's last line."""
    if result.outcomes:
        return
    log = workdir / f"{side}.log"
    tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
    raise UsageError(
        f"the {side} run reported no test ({' '.join(tail) or 'no output'}); "
        f"its log is {log} ({hint})"
    )


def format_comparison(comparison: Comparison) -> str:
    stock, ours = comparison.stock, comparison.ours
    label = comparison.label
    lines = [
        f"{comparison.title}: {comparison.suite}",
        f"{comparison.library} {comparison.torch_version}; load average "
        f"{comparison.load_before:.1f} before, {comparison.load_after:.1f} after",
        "",
        f"| {'run':5} | {'passed':>6} | {'failed':>6} | {'errors':>6} | {'skipped':>7} | {'time':>7} |",
        f"|{'-' * 7}|{'-' * 8}|{'-' * 8}|{'-' * 8}|{'-' * 9}|{'-' * 9}|",
    ]
    for side, result in (("stock", stock), (label, ours)):
        time_text = f"{result.seconds:.0f} s" + ("!" if result.timed_out else "")
        lines.append(
            f"| {side:5} | {result.count('passed'):6} | {result.count('failed'):6} | "
            f"{result.count('error'):6} | {result.count('skipped'):7} | {time_text:>7} |"
        )
    for side, result in (("stock", stock), (label, ours)):
        if result.timed_out:
            lines.append(f"the {side} run was killed at its timeout: its counts are partial")
    both = sorted(stock.failing() & ours.failing())
    lines += ["", f"failing on both sides (stock's own failures): {len(both)}"]
    lines += [f"  {test}: {stock.messages.get(test, '')}" for test in both]
    lines += _rechecks_text(comparison)
    if comparison.missing():
        lines += ["", f"reported by one run only: {len(comparison.missing())}"]
        lines += [f"  {test}" for test in comparison.missing()]
    lines.append("")
    if comparison.same_failures:
        lines.append(f"verdict: {label} has stock's failures only")
    elif comparison.differences():
        lines.append(
            f"verdict: {label} fails {len(comparison.differences())} test(s) that stock passes"
        )
    else:
        lines.append("verdict: incomplete (a run timed out or left tests out); see above")
    return "\n".join(lines)


def _rechecks_text(comparison: Comparison) -> list[str]:
    label = comparison.label
    reruns = comparison.rechecks[0].reruns if comparison.rechecks else 0
    lines: list[str] = []
    for title, group in (
        (f"fail only with {label}, on every re-run too", comparison.differences()),
        ("fail only with stock, on every re-run too", comparison.only_stock()),
        ("failed on one side once, not on its re-runs (flaky under load)", comparison.flakes()),
    ):
        lines += ["", f"{title}: {len(group)}"]
        for recheck in group:
            lines.append(
                f"  {recheck.test} (first failed with {recheck.failed_first_with}; re-runs: "
                f"stock failed {recheck.stock_failures}/{reruns}, {label} "
                f"{recheck.ours_failures}/{reruns}): {recheck.message}"
            )
    return lines


def add_run_options(parser: argparse.ArgumentParser, *, timeout: float) -> None:
    """The options every suite runner takes."""
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter with torch (default: this one)"
    )
    parser.add_argument(
        "--jobs", type=int, default=2, help="pytest-xdist processes; 0 for one (default 2)"
    )
    parser.add_argument(
        "--timeout", type=float, default=timeout,
        help=f"seconds for each whole run (default {timeout:.0f})",
    )  # fmt: skip
    parser.add_argument(
        "--per-test-timeout", type=int, default=300, help="seconds for one test (default 300)"
    )
    parser.add_argument(
        "--reruns", type=int, default=1,
        help="re-runs, on each side, of a test that failed on one side only (default 1)",
    )  # fmt: skip
    parser.add_argument("--keep", type=Path, help="keep junit-xml and logs in this directory")


def parse_arguments(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> argparse.Namespace:
    """``parser``'s options, and ``pytest_args``: what follows ``--`` (``-k ...``)."""
    parser.usage = "%(prog)s [options] SUITE [-- PYTEST_ARGS ...]"
    arguments = list(sys.argv[1:] if argv is None else argv)
    cut = arguments.index("--") if "--" in arguments else len(arguments)
    options = parser.parse_args(arguments[:cut])
    options.pytest_args = arguments[cut + 1 :]
    if options.reruns < 1 or options.jobs < 0:
        parser.error("--reruns must be at least 1 and --jobs at least 0")
    return options


def probe_swap(python: str, side: Side, probe: str, what: str) -> list[str]:
    """The words ``probe`` prints in ``side``'s interpreter; the first must be ``True``."""
    answer = subprocess.run(
        [python, "-c", probe], env=environment(side), capture_output=True, text=True, timeout=300
    )
    words = answer.stdout.split()
    if answer.returncode != 0 or words[:1] != ["True"]:
        last = (answer.stderr.strip().splitlines() or [answer.stdout.strip()])[-1]
        raise UsageError(
            f"{python} cannot swap {what} in ({last}); "
            "is loaderdoctor importable there (pip install -e . or PYTHONPATH=src)?"
        )
    return words


def prepare_workdir(keep: Path | None, prefix: str, sitecustomize: str) -> tuple[Path, Path]:
    """The run's folder (``keep``, or a new temporary one) with an empty ``pytest.ini`` (neither
    ours nor the suite folder's config applies) and ``swap/sitecustomize.py``: (folder, swap)."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix)) if keep is None else keep
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "pytest.ini").write_text("[pytest]\n")
    swap_dir = workdir / "swap"
    swap_dir.mkdir(exist_ok=True)
    (swap_dir / "sitecustomize.py").write_text(sitecustomize)
    return workdir, swap_dir
