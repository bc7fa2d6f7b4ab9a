"""Trace the path of one worker death through the supervised core and count its stops.

The failure is the one docs/failure-path.md draws: SIGSEGV at sample 4 with healing on, the re-try
alone kills its fresh worker again, a control loads fine, sample 4 is quarantined. It runs on the
unit fixture of ``tests/test_recovery.py`` (fake pool and books, a probe that answers at once: no
process starts), under ``sys.setprofile``, from ``Recovery.handle`` to the incident's warning.

Counted: calls made from our code into ``loaderdoctor.supervise`` and the compat modules (not
dataclass constructors, comprehensions or generator expressions); distinct functions (the
stops a reader makes); runs of calls in heal_policy.py (visits to the policy); returns to a
module already left. ``--list`` prints every call in order.

Example: .venv/bin/python scripts/failure_path.py --list
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests")]

import loaderdoctor  # noqa: E402

PACKAGE = Path(loaderdoctor.__file__).parent
COUNTED = (PACKAGE / "supervise", PACKAGE / "torch_compat.py", PACKAGE / "cpython_compat.py")
POLICY = PACKAGE / "supervise" / "heal_policy.py"
# The planner, the policy, the executor and the books they keep
CORE = (
    "recovery.py",
    "controls.py",
    "repair.py",
    "heal_policy.py",
    "supervision.py",
    "incidents.py",
)
SKIPPED_NAMES = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>")


@dataclass
class TracedPath:
    calls: list[tuple[str, str]] = field(default_factory=list)  # (module, function)

    @property
    def stops(self) -> int:
        return len(set(self.calls))

    @property
    def core_stops(self) -> int:
        return len({call for call in self.calls if call[0] in CORE})

    @property
    def policy_visits(self) -> int:
        visits, inside = 0, False
        for module, _ in self.calls:
            now = module == POLICY.name
            visits += now and not inside
            inside = now
        return visits

    @property
    def returns(self) -> int:
        """Arrivals in a module the path had already left."""
        left: set[str] = set()
        count, current = 0, None
        for module, _ in self.calls:
            if module != current:
                if module in left:
                    count += 1
                if current is not None:
                    left.add(current)
                current = module
        return count


def counted(path: str) -> bool:
    return any(path == str(p) or path.startswith(str(p) + "/") for p in COUNTED)


def trace_one_death() -> TracedPath:
    from loaderdoctor.supervise.parent.watch import PoolFailure
    from test_recovery import _death, _setup

    recovery, _books, _pool, _sup, _probed = _setup(heal=True, probe_finds=4)
    failure: PoolFailure = _death(4)
    traced = TracedPath()

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code.co_name in SKIPPED_NAMES or not counted(code.co_filename):
            return
        caller = frame.f_back
        if caller is None or not caller.f_code.co_filename.startswith(str(PACKAGE)):
            return  # called by the fixture or a library, not by our code
        if code.co_name == "__init__" and "dataclass" in caller.f_code.co_filename:
            return
        traced.calls.append((Path(code.co_filename).name, code.co_qualname))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sys.setprofile(profile)
        try:
            recovery.handle(failure)
        finally:
            sys.setprofile(None)
    return traced


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Count the stops of one worker death's path through the supervised core.",
        epilog="The path is drawn in docs/failure-path.md.",
    )
    parser.add_argument("--list", action="store_true", help="print every call, in order")
    options = parser.parse_args(argv)
    traced = trace_one_death()
    if options.list:
        for number, (module, function) in enumerate(traced.calls, 1):
            print(f"{number:3d}  {module:24s} {function}")
    print(
        f"calls: {len(traced.calls)}  stops (distinct functions): {traced.stops} "
        f"({traced.core_stops} in {', '.join(CORE)})  "
        f"visits to heal_policy.py: {traced.policy_visits}  "
        f"returns to a module already left: {traced.returns}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
