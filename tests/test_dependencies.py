"""Every import under src/ is a declared runtime dependency, checked by deptry."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def deptry(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deptry", "--no-ansi", "src"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_every_import_in_src_is_a_declared_runtime_dependency() -> None:
    result = deptry(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_a_dev_only_import_in_src_is_caught(tmp_path: Path) -> None:
    # The project's own deptry settings, on a package that imports numpy (a dev-extra tool only).
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    package = tmp_path / "src" / "loaderdoctor"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import numpy\nimport torch\n")
    result = deptry(tmp_path)
    assert result.returncode == 1
    assert "DEP004 'numpy' imported but declared as a dev dependency" in result.stderr
