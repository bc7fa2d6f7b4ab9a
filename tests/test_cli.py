"""The command registry and the one place where errors become exit codes."""

from __future__ import annotations

import argparse

import pytest

from loaderdoctor import cli
from loaderdoctor.cli import CommandError, ExitCode


def test_every_command_has_a_one_line_help_and_its_own_subparser() -> None:
    parser = cli.build_parser()
    (subcommands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    registry = cli.commands()
    assert list(registry) == [
        "demo",
        "env",
        "lint",
        "run",
        "top",
        "report",
        "explain",
        "scan",
        "tune",
    ]
    assert list(subcommands.choices) == list(registry)
    for name, command in registry.items():
        doc = (command.__doc__ or "").strip().splitlines()
        assert doc and doc[0].endswith("."), name
        assert subcommands.choices[name].description == doc[0]
        assert subcommands.choices[name].get_default("_command") is command


class Fails:
    """A command that fails the way it is told to."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def register(self, parser: argparse.ArgumentParser) -> None:
        pass

    def run(self, args: argparse.Namespace) -> int:
        raise self.error


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (
            CommandError("no such file: x"),
            ExitCode.USAGE,
            "loaderdoctor fails: error: no such file: x",
        ),
        (KeyboardInterrupt(), ExitCode.INTERRUPTED, "loaderdoctor fails: interrupted"),
        (
            KeyError("oops"),
            ExitCode.INTERNAL,
            "loaderdoctor fails: internal error: KeyError: 'oops' (set LOADERDOCTOR_DEBUG=1 for "
            "the traceback, and please report it)",
        ),
    ],
)
def test_errors_become_exit_codes_in_main_only(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: BaseException,
    code: int,
    line: str,
) -> None:
    monkeypatch.delenv("LOADERDOCTOR_DEBUG", raising=False)
    monkeypatch.setattr(cli, "commands", lambda: {"fails": Fails(error)})
    assert cli.main(["fails"]) == code
    assert capsys.readouterr().err.splitlines() == [line]


def test_no_command_prints_the_help_and_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main([]) == ExitCode.USAGE
    assert capsys.readouterr().out.startswith("usage: loaderdoctor [-h] [--version] COMMAND ...")
