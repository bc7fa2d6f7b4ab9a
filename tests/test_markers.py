"""The quick tier (``-m "not slow"``) starts no process: conftest fails a test that would."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_an_unmarked_test_that_starts_a_process_fails(tmp_path: Path) -> None:
    shutil.copy(Path(__file__).parent / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the warning: an unregistered 'slow'
    (tmp_path / "test_inner.py").write_text(
        "import multiprocessing, subprocess, sys\n"
        "import pytest\n"
        "def test_popen():\n"
        "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
        "def test_worker():\n"
        "    p = multiprocessing.get_context('spawn').Process(target=print)\n"
        "    p.start(); p.join(60)\n"
        "@pytest.mark.slow\n"
        "def test_marked():\n"
        "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
        "def test_quick():\n"
        "    assert True\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rE", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    errors = sorted(line for line in result.stdout.splitlines() if line.startswith("ERROR "))
    assert [line.split(" - ")[0] for line in errors] == [
        "ERROR test_inner.py::test_popen",
        "ERROR test_inner.py::test_worker",
    ], result.stdout
    reasons = [line for line in result.stdout.splitlines() if "is not marked slow:" in line]
    assert [line.split(": ")[1].split()[0] for line in reasons[:2]] == [
        "subprocess",
        "multiprocessing",
    ], result.stdout
    # The guard fails the test at teardown: the test body itself ran and passed.
    assert result.stdout.splitlines()[-1].startswith("4 passed, 1 warning, 2 errors in")
