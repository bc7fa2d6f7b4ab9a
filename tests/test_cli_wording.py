"""What a new user reads and what the exit status says.

Through a pipe (``| tee``, a CI log) and through a pseudo-terminal at 80 columns: the same words.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from cli_terminal import plain, run_in_pty
from conftest import default_sigint, run_python
from loaderdoctor.cli import EXIT_STATUS_HELP, main
from test_run_units import sample_report

HEADLINE = re.compile(r"^loaderdoctor run: (.*) after [0-9.]+ (?:ms|s)$", re.MULTILINE)


def headline(text: str) -> str:
    found = HEADLINE.findall(text)
    assert len(found) == 1, text
    return str(found[0])


# --- --help teaches the exit status --------------------------------------------------------------
def test_top_level_help_says_what_the_exit_status_means(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.endswith(f"\n{EXIT_STATUS_HELP}\n")


@pytest.mark.parametrize(
    ("command", "status"),
    [
        ("demo", "Exit status: 0 every planted fault got its verdict"),
        ("env", "Exit status: 0 every check passed (warnings allowed), 1 a check failed"),
        ("lint", "Exit status: 0 clean, 1 a finding at --fail-on or worse, 2 bad usage."),
        ("run", "Exit status: the command's own (128 + N after signal N); 2 for a usage error."),
        ("top", "Exit status: 0 detached (q, Ctrl-C, or the job ended); 2 no running job"),
        ("report", "Exit status: 0 the run succeeded (healed or not)"),
        ("explain", "exit status:\n  0  a cause was named"),
        ("scan", "Exit status: 0 clean, 1 bad samples found, 2 usage error, 130 interrupted"),
        ("tune", "Exit status: 0 a configuration is recommended, 1 none fits the memory budget"),
    ],
)
def test_each_command_help_says_what_its_exit_status_means(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str, status: str
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per paragraph: compare it whole
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert status in capsys.readouterr().out


# --- a typo'd flag shows the subcommand's usage ----------------------------------------------------
def test_a_typod_flag_shows_the_subcommands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["scan", "data.py:train", "--num-worker", "4", "--time-out", "3"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: loaderdoctor scan [-h] [--num-workers N]")
    assert err.endswith("loaderdoctor scan: error: unrecognized arguments: --time-out 3\n"), (
        err
    )  # --num-worker is argparse's prefix of --num-workers: accepted


def test_an_unknown_flag_before_any_command_keeps_the_top_level_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--verbose", "env"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: loaderdoctor [-h] [--version] COMMAND ...")
    assert err.endswith("loaderdoctor: error: unrecognized arguments: --verbose\n")


# --- run: "the command failed", not "loaderdoctor crashed"; Ctrl-C is an interruption ------------
FAILS = ["-c", "import sys; sys.exit(1)"]
CTRL_C = ["-c", "import os, signal, time; os.kill(os.getpid(), signal.SIGINT); time.sleep(9)"]


@pytest.mark.slow
@pytest.mark.parametrize("through", ["pipe", "pty"])
@pytest.mark.parametrize(
    ("command", "code", "expected"),
    [
        (FAILS, 1, "the command failed: exit code 1"),
        (CTRL_C, 130, "the command was interrupted: exit code 130"),
        (["-c", "pass"], 0, "the command succeeded: exit code 0"),
    ],
)
def test_run_says_what_became_of_the_command(
    tmp_path: Path, through: str, command: list[str], code: int, expected: str
) -> None:
    args = ["-m", "loaderdoctor", "run", "--report-dir", str(tmp_path / "r")]
    args += ["--", sys.executable, *command]
    if through == "pipe":
        # The command interrupts itself: it must get SIGINT's default, not an ignored SIGINT
        # inherited from a test run started in the background (nohup, `.ci/run &`).
        result = run_python(args, cwd=str(tmp_path), preexec_fn=default_sigint)
        shown = result.stderr
    else:
        result = run_in_pty(args, cwd=str(tmp_path))
        shown = plain(result.stdout)
    assert result.returncode == code, shown
    assert headline(shown) == expected
    assert "crashed" not in shown
    lines = shown.splitlines()
    assert lines[-1].startswith("verdict: no DataLoader worker died")  # the verdict comes last
    if through == "pipe":  # a log has no edge to fold at: the paths stay whole, to copy
        folder = tmp_path / "r"
        assert lines[-2] == f"  report: {folder / 'report.json'}, {folder / 'report.html'}"


def healed_run_report(folder: Path, exit_code: int) -> Path:
    report = sample_report()
    report.incidents[0].action = "skipped"
    report.exit_code = exit_code
    report.status = "healed" if exit_code == 0 else "crashed"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps(report.to_dict()))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize(("exit_code", "status"), [(0, 0), (1, 1)])
def test_report_exits_0_for_a_healed_run_whose_command_succeeded(
    tmp_path: Path, exit_code: int, status: int
) -> None:
    folder = healed_run_report(tmp_path / "r", exit_code)
    result = run_python(["-m", "loaderdoctor", "report", str(folder), "--no-html"])
    assert result.returncode == status, result.stderr
    expected = (
        "the command succeeded, healed: exit code 0"
        if exit_code == 0
        else "the command failed: exit code 1"
    )
    assert headline(result.stdout) == expected


# --- no report is overwritten without a word ------------------------------------------------------
@pytest.mark.slow
def test_a_later_run_keeps_the_earlier_report(tmp_path: Path) -> None:
    """`run` twice in one folder: the crash report of the first survives `run -- ls`."""
    first = run_python(
        ["-m", "loaderdoctor", "run", "--", sys.executable, *FAILS], cwd=str(tmp_path)
    )
    assert first.returncode == 1, first.stderr
    folder = tmp_path / "loaderdoctor-report"
    crash_report = (folder / "report.json").read_text()
    second = run_python(["-m", "loaderdoctor", "run", "--", "ls"], cwd=str(tmp_path))
    assert second.returncode == 0, second.stderr
    (kept,) = (folder / "earlier").iterdir()
    assert second.stderr.splitlines()[0] == (
        f"loaderdoctor run: the earlier report in loaderdoctor-report is kept in "
        f"loaderdoctor-report/earlier/{kept.name}"
    )
    assert re.fullmatch(r"\d{8}-\d{6}", kept.name)
    assert (kept / "report.json").read_text() == crash_report
    assert sorted(p.name for p in kept.iterdir()) == ["report.html", "report.json"]
    assert json.loads((folder / "report.json").read_text())["command"] == ["ls"]


@pytest.mark.slow
def test_report_of_a_scan_json_names_its_page_after_it(tmp_path: Path) -> None:
    from test_scan_report import sample_report as sample_scan

    for name in ("scan.json", "scan2.json"):
        (tmp_path / name).write_text(json.dumps(sample_scan().to_dict()))
    (tmp_path / "scan.html").write_text("the first scan's page")
    result = run_python(["-m", "loaderdoctor", "report", str(tmp_path / "scan2.json")])
    assert result.returncode == 1, result.stderr
    assert (tmp_path / "scan.html").read_text() == "the first scan's page"
    assert "<h2>Bad samples</h2>" in (tmp_path / "scan2.html").read_text()
    assert result.stdout.splitlines()[-1] == f"report: {tmp_path / 'scan2.html'}"


# --- an error comes first, and alone ---------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("through", ["pipe", "pty"])
def test_demo_keep_into_a_full_folder_is_one_line_before_any_intro(
    tmp_path: Path, through: str
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "mine.txt").write_text("the user's own file")
    args = ["-m", "loaderdoctor", "demo", "--keep", "data"]
    if through == "pipe":
        result = run_python(args, cwd=str(tmp_path))
        assert result.stdout == ""
        shown = result.stderr
    else:
        result = run_in_pty(args, cwd=str(tmp_path))
        shown = plain(result.stdout)
    assert result.returncode == 2
    assert shown == "loaderdoctor demo: error: data exists and is not an empty directory\n"


TWO_LOADERS = """
import torch
from loaderdoctor import DataLoader


class Three(torch.utils.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, index):
        if index == 3:
            raise ValueError("sample 3 is unreadable")
        return index


if __name__ == "__main__":
    for run in range(2):  # two loaders built at one line, each skipping sample 3
        loader = DataLoader(Three(), batch_size=2, num_workers=1, heal=True)
        assert sum(len(batch) for batch in loader) == 5
"""


@pytest.mark.slow
def test_each_heal_action_warns_even_when_worded_alike(tmp_path: Path) -> None:
    """README: "each action emits a HealWarning"; Python shows one text once per line."""
    (tmp_path / "two.py").write_text(TWO_LOADERS)
    result = run_python([str(tmp_path / "two.py")], env={"PYTHONWARNINGS": ""})
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "HealWarning" in line]
    assert len(warned) == 2, result.stderr
    assert warned[0] == warned[1]
    assert warned[0].startswith(f"{tmp_path / 'two.py'}:19: HealWarning: loaderdoctor healed: ")


# --- a log keeps names whole (item 7) --------------------------------------------------------------
@pytest.mark.slow
def test_a_scan_in_a_log_keeps_file_names_whole(tmp_path: Path) -> None:
    from PIL import Image

    images = tmp_path / "photos_of_the_validation_split" / "class_with_a_long_name"
    images.mkdir(parents=True)
    for number in range(4):
        Image.new("RGB", (16, 16), (number, 0, 0)).save(images / f"img{number}.png")
    bad = images / ("a_truncated_image_whose_name_is_longer_than_a_terminal_line_" * 2 + ".png")
    Image.new("RGB", (16, 16)).save(bad)
    bad.write_bytes(bad.read_bytes()[:60])
    out = ["--out", str(tmp_path / "q.json"), "--num-workers", "1"]
    result = run_python(["-m", "loaderdoctor", "scan", str(tmp_path), *out], env={"COLUMNS": "80"})
    assert result.returncode == 1, result.stderr
    (row,) = [line for line in result.stdout.splitlines() if str(bad) in line]
    assert row.startswith("│ ")  # the bad-samples table's row, the whole path in one cell


# --- "more:" works wherever loaderdoctor is installed (item 9) -------------------------------------
@pytest.mark.slow
def test_explain_cause_prints_the_page_away_from_any_checkout(tmp_path: Path) -> None:
    page = Path(__file__).parents[1] / "docs" / "causes" / "native-crash.md"
    result = run_python(
        ["-m", "loaderdoctor", "explain", "--cause", "native-crash"], cwd=str(tmp_path)
    )
    assert (result.returncode, result.stdout) == (0, page.read_text(encoding="utf-8"))
    unknown = run_python(
        ["-m", "loaderdoctor", "explain", "--cause", "segfault"], cwd=str(tmp_path)
    )
    assert unknown.returncode == 2
    assert unknown.stderr.startswith(
        "loaderdoctor explain: error: --cause segfault: no such cause (known: sample-error, "
    )
