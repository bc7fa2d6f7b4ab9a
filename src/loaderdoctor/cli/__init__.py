"""The ``loaderdoctor`` command line: one module per subcommand, errors to exit codes here only."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from enum import IntEnum
from typing import Protocol

from loaderdoctor import cpython_compat


class ExitCode(IntEnum):
    OK = 0
    FINDINGS = 1
    USAGE = 2
    INTERNAL = 3
    INTERRUPTED = 130


class CommandError(Exception):
    """A problem the user can fix (a bad path, a spec that does not load): one line, no traceback."""

    def __init__(self, message: str, code: ExitCode = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.code = code


class Command(Protocol):
    """A subcommand: one module of this package, registered in :func:`commands`.

    The module's docstring (its first line) is the subcommand's ``--help``; ``register`` adds
    its options; ``run`` does the work (core call, renderer) and returns an exit code, raising
    :class:`CommandError` for what the user can fix. Modules import their heavy dependencies
    inside ``run``, so that ``loaderdoctor --help`` stays quick.
    """

    def register(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def commands() -> dict[str, Command]:
    """Every subcommand, in ``--help`` order. Add one by adding its module here."""
    from loaderdoctor.cli import demo, env, explain, lint, report, run, scan, top, tune

    return {
        "demo": demo,
        "env": env,
        "lint": lint,
        "run": run,
        "top": top,
        "report": report,
        "explain": explain,
        "scan": scan,
        "tune": tune,
    }


EXIT_STATUS_HELP = (
    "Exit status: 0 nothing wrong found, 1 something found (a failed check, a bad sample, a "
    "lint finding, a run whose command failed), 2 a usage error, 3 an internal error of "
    "loaderdoctor's (please report it), 130 interrupted; run exits with its command's own status, "
    "and explain, like grep, 0 when it names a cause. loaderdoctor COMMAND --help says what each "
    "command's status means."
)


def build_parser() -> argparse.ArgumentParser:
    from loaderdoctor import __version__

    parser = argparse.ArgumentParser(
        prog="loaderdoctor",
        description=(
            "Diagnose and heal PyTorch DataLoader worker deaths: every crash gets a cause, "
            "the sample in flight, the evidence and the fix."
        ),
        epilog=EXIT_STATUS_HELP,
    )
    parser.add_argument("--version", action="version", version=f"loaderdoctor {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in commands().items():
        doc = (command.__doc__ or "").strip().splitlines()[0]
        sub = subparsers.add_parser(name, help=doc, description=doc)
        command.register(sub)
        sub.set_defaults(_command=command)
    return parser


# torch's wheels do not require numpy, and ``import torch`` without it warns "Failed to initialize
# NumPy" (torch/csrc/utils/tensor_numpy.cpp) before any output: a remark on the environment that no
# command here needs numpy for, printed above a fresh machine's first demo. The library leaves it
# alone (a user's own ``import torch`` says what stock torch says); the command line, whose
# processes are its own, silences it there and in the workers it spawns. ``loaderdoctor run``'s
# command is a process of the user's and keeps the warning.
NUMPY_MISSING_FILTER = "ignore:Failed to initialize NumPy:UserWarning"


def _quiet_numpy_missing() -> None:
    """Silence torch's missing-numpy import warning in this process and the processes it spawns
    (multiprocessing passes ``sys.warnoptions`` on to spawned and forkserver children)."""
    import warnings

    if NUMPY_MISSING_FILTER not in sys.warnoptions:
        sys.warnoptions.append(NUMPY_MISSING_FILTER)
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)


def main(argv: Sequence[str] | None = None) -> int:
    _quiet_numpy_missing()
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # `scan --nosuch`: scan's usage and its error, not the top level's
        given = list(sys.argv[1:] if argv is None else argv)
        subparsers = cpython_compat.subcommand_parsers(parser)
        own = parser
        if args.command and given.index(args.command) < given.index(unknown[0]):
            own = subparsers.choices[args.command]
        own.error(f"unrecognized arguments: {' '.join(unknown)}")
    command: Command | None = getattr(args, "_command", None)
    if command is None:
        parser.print_help()
        return ExitCode.USAGE
    try:
        return int(command.run(args))
    except CommandError as error:
        print(f"loaderdoctor {args.command}: error: {error}", file=sys.stderr)
        return int(error.code)
    except KeyboardInterrupt:
        print(f"loaderdoctor {args.command}: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return ExitCode.OK
    except Exception as error:  # a bug of ours: one line by default, the traceback on request
        if os.environ.get("LOADERDOCTOR_DEBUG"):
            raise
        print(
            f"loaderdoctor {args.command}: internal error: {type(error).__name__}: {error} "
            "(set LOADERDOCTOR_DEBUG=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        return ExitCode.INTERNAL


def console_main() -> None:
    sys.exit(main())
