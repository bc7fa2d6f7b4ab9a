"""``loaderdoctor run``'s contract with its user: bad options refused up front, its own death."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_python


@pytest.mark.parametrize(
    ("report_dir", "message"),
    [
        ("{tmp}/taken", "--report-dir {tmp}/taken is a file, not a folder"),
        ("/proc/loaderdoctor-report", "--report-dir /proc/loaderdoctor-report: cannot create it: "
         "No such file or directory"),
        ("{tmp}/taken/sub", "--report-dir {tmp}/taken/sub: cannot create it: Not a directory"),
    ],
)  # fmt: skip
def test_a_report_dir_that_cannot_be_used_is_one_line_before_the_command_starts(
    tmp_path: Path, report_dir: str, message: str
) -> None:
    (tmp_path / "taken").write_text("a file in the way\n")
    started = tmp_path / "started"
    result = run_python(
        [
            "-m", "loaderdoctor", "run", "--report-dir", report_dir.format(tmp=tmp_path),
            "--", "sh", "-c", f"touch {started}",
        ],
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"loaderdoctor run: error: {message.format(tmp=tmp_path)}"
    ]
    assert not started.exists()  # found before the command started
    assert (tmp_path / "taken").read_text() == "a file in the way\n"
