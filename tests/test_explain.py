"""``loaderdoctor explain``: causes from the message alone, table rows as data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import run_python
from loaderdoctor.forensics import CAUSES
from loaderdoctor.forensics.symptoms import SYMPTOMS, catalog_pattern, explain_text
from loaderdoctor.report.explain import format_text

KILLED = "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed."
BUS = (
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
    "shared memory (shm).\nRuntimeError: DataLoader worker (pid(s) 31337) exited unexpectedly"
)


def top(text: str) -> list[str]:
    return [guess.cause for guess in explain_text(text).causes]


def test_killed_points_at_oom_first_then_an_external_kill() -> None:
    assert top(KILLED)[:2] == ["oom-killed", "killed-by-signal"]
    guess = explain_text(KILLED).causes[0]
    assert any("dmesg" in check for check in guess.checks)
    assert any("loaderdoctor run" in check for check in guess.checks)


def test_bus_error_and_exited_unexpectedly_is_shm() -> None:
    explanation = explain_text(BUS)
    assert explanation.causes[0].cause == "shm-exhausted"
    assert any("df -h /dev/shm" in check for check in explanation.causes[0].checks)
    assert {m.line_number for m in explanation.matches} == {1, 2}


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("OSError: [Errno 24] Too many open files", "fd-exhausted"),
        (
            "RuntimeError: DataLoader worker (pid 7) is killed by signal: Segmentation fault.",
            "native-crash",
        ),
        ("ValueError: Caught ValueError in DataLoader worker process 0.", "sample-error"),
        (
            "RuntimeError: stack expects each tensor to be equal size, but got [3] at entry 0",
            "collate-error",
        ),
        ("RuntimeError: DataLoader timed out after 60 seconds", "worker-hang"),
        ("RuntimeError: Cannot re-initialize CUDA in forked subprocess.", "cuda-in-worker"),
        (
            "RuntimeError: unable to allocate shared memory(shm) for file </torch_1_2>",
            "shm-exhausted",
        ),
        (
            "An attempt has been made to start a new process before the\n"
            "        current process has finished its bootstrapping phase.",
            "main-guard-missing",
        ),
    ],
)
def test_one_line_symptoms(text: str, cause: str) -> None:
    assert top(text)[0] == cause


def test_every_row_names_catalog_causes_and_compiles() -> None:
    for symptom in SYMPTOMS:
        re.compile(symptom.pattern)
        assert symptom.causes and all(cause in CAUSES for cause, _ in symptom.causes), symptom.id


def test_every_catalog_symptom_is_recognised() -> None:
    for cause in CAUSES.values():
        for text in cause.symptoms:
            re.compile(catalog_pattern(text))
            if len(text) >= 12:
                example = re.sub(r"\bN\b", "4242", text)
                assert explain_text(example).causes, (cause.id, text)


def test_nothing_matched() -> None:
    assert explain_text("all is well\nloss 0.1").causes == []
    assert "no known DataLoader failure" in format_text(explain_text("ok"))


@pytest.mark.slow
def test_cli_from_stdin_and_file(tmp_path) -> None:
    log = tmp_path / "train.log"
    log.write_text(f"epoch 3\n{KILLED}\n")
    result = run_python(["-m", "loaderdoctor", "explain", str(log)])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].startswith("1. oom-killed")
    assert "line 2: " + KILLED in result.stdout
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    assert run_python(["-m", "loaderdoctor", "explain", str(empty)]).returncode == 1
    missing = run_python(["-m", "loaderdoctor", "explain", str(tmp_path / "nope.log")])
    assert missing.returncode == 2 and "cannot read" in missing.stderr


PLATFORM_LOGS = Path(__file__).parent / "fixtures" / "explain"


@pytest.mark.parametrize(
    ("log", "causes"),
    [
        ("windows-paging-file.log", ["paging-file-too-small", "native-crash"]),
        ("windows-main-guard.log", ["main-guard-missing", "unpicklable"]),
        ("windows-lambda.log", ["unpicklable", "main-guard-missing"]),
        ("notebook-spawn.log", ["unpicklable", "native-crash"]),
        ("macos-too-many-open-files.log", ["fd-exhausted"]),
        ("macos-objc-fork.log", ["mps-in-worker", "native-crash"]),
        ("macos-mps-share.log", ["mps-in-worker"]),
    ],
)
def test_spawn_platform_logs_name_their_cause(log: str, causes: list[str]) -> None:
    # Logs shaped as Windows and macOS users post them; explain reads them on any platform.
    assert top((PLATFORM_LOGS / log).read_text())[: len(causes)] == causes


def test_notebook_classes_get_the_notebook_note() -> None:
    text = (PLATFORM_LOGS / "notebook-spawn.log").read_text()
    notes = [match.note for match in explain_text(text).matches]
    assert notes[0] == (
        "A class or function defined in a notebook cell: spawned workers cannot import it."
    )
