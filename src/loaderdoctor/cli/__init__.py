"""The ``loaderdoctor`` command line: one module per subcommand, errors to exit codes here only."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from enum import IntEnum
from types import ModuleType


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


# The registry: each module has a one-line docstring (its --help), ``register(parser)`` and
# ``run(args) -> int``. Add a subcommand by adding its module name here.
COMMANDS: tuple[str, ...] = ("demo", "env", "lint", "run", "report", "explain", "scan", "tune")


def _load(name: str) -> ModuleType:
    return importlib.import_module(f"loaderdoctor.cli.{name}")


def build_parser() -> argparse.ArgumentParser:
    from loaderdoctor import __version__

    parser = argparse.ArgumentParser(
        prog="loaderdoctor",
        description=(
            "Diagnose and heal PyTorch DataLoader worker deaths: every crash gets a cause, "
            "the sample in flight, the evidence and the fix."
        ),
    )
    parser.add_argument("--version", action="version", version=f"loaderdoctor {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = _load(name)
        except ModuleNotFoundError as error:
            if error.name == f"loaderdoctor.cli.{name}":
                continue  # a subcommand not built yet
            raise
        doc = (module.__doc__ or "").strip().splitlines()[0]
        sub = subparsers.add_parser(name, help=doc, description=doc)
        module.register(sub)
        sub.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    module = getattr(args, "_module", None)
    if module is None:
        parser.print_help()
        return ExitCode.USAGE
    try:
        return int(module.run(args))
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
