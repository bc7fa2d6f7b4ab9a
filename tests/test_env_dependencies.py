"""``env``'s dependencies check: a module loaderdoctor or the target dataset
imports that cannot be imported is a failed check, never a pass, and never a traceback."""

from __future__ import annotations

import ast
import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import run_python
from loaderdoctor.env import CATALOG, CHECKS
from loaderdoctor.env.checks_imports import module_names, own_requirements, required_imports

BLOCKER = textwrap.dedent(
    """
    import sys

    BLOCKED = {blocked!r}


    class Blocker:
        '''Makes modules unimportable, as a broken or partial installation would.'''

        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
            return None


    sys.meta_path.insert(0, Blocker())
    """
)


def env_json(*args: str, blocked: tuple[str, ...] = (), tmp_path: Path) -> tuple[int, Any, str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(blocked)))
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    result = run_python(
        ["-m", "loaderdoctor", "env", "--json", *args], env={"PYTHONPATH": path}, timeout=90
    )
    data = json.loads(result.stdout) if result.stdout else None
    return result.returncode, data, result.stderr


def dependencies(data: Any) -> dict[str, Any]:
    (check,) = [check for check in data["checks"] if check["id"] == "dependencies"]
    return check


# --- unit ---------------------------------------------------------------------------------------
def test_every_catalog_row_has_one_check_and_every_check_a_row() -> None:
    assert list(CHECKS) == [spec.id for spec in CATALOG]


def test_the_installed_distribution_declares_what_it_imports() -> None:
    assert own_requirements() == ["torch", "psutil", "rich", "pillow"]  # [dev] extras left out
    assert module_names("pillow") == ["PIL"]
    assert module_names("torch") == ["torch"]
    assert module_names("no-such-distribution-here") is None


def test_required_imports_skip_optional_and_typing_only_ones() -> None:
    source = textwrap.dedent(
        """
        import os, numpy.linalg
        from typing import TYPE_CHECKING
        from . import sibling
        from cv2_lazy import thing as _
        try:
            import simplejson
        except ImportError:
            simplejson = None
        if TYPE_CHECKING:
            import pandas

        def __getitem__(self, index):
            import turbojpeg
            return turbojpeg
        """
    )
    assert required_imports(ast.parse(source)) == ["cv2_lazy", "numpy", "turbojpeg"]


# --- integration: the real CLI with a module made unimportable -----------------------------------
@pytest.mark.slow
def test_a_missing_dependency_of_loaderdoctor_fails_the_check(tmp_path: Path) -> None:
    code, data, stderr = env_json(blocked=("PIL",), tmp_path=tmp_path)
    check = dependencies(data)
    assert check["status"] == "fail", stderr
    assert check["message"] == (
        "loaderdoctor needs PIL: ModuleNotFoundError: No module named 'PIL' (blocked) (from pillow)"
    )
    assert check["value"] == 1
    assert check["fix"].startswith("Install what is missing in this environment (`pip install")
    assert code == 1  # a failed check: findings
    assert data["internal_errors"] == []


@pytest.mark.slow
def test_nothing_missing_is_a_pass(tmp_path: Path) -> None:
    _, data, stderr = env_json(tmp_path=tmp_path)
    check = dependencies(data)
    assert (check["status"], check["message"]) == (
        "pass",
        "loaderdoctor's dependencies are all importable",
    ), stderr


@pytest.mark.slow
def test_a_target_whose_import_is_missing_fails_the_check_not_the_command(tmp_path: Path) -> None:
    dataset = tmp_path / "needs_more.py"
    dataset.write_text("import torch\nimport not_installed_here_xyz\n\ndata = list(range(8))\n")
    code, data, stderr = env_json("--target", f"{dataset}:data", tmp_path=tmp_path)
    assert code == 1, stderr  # findings, not a usage error (2) or an internal one (3)
    check = dependencies(data)
    assert check["status"] == "fail"
    assert check["message"] == "needs_more.py imports not_installed_here_xyz: not installed"
    assert check["details"]["target_imports"] == ["not_installed_here_xyz", "torch"]
    by_id = {c["id"]: c for c in data["checks"]}
    assert by_id["shm-size"]["status"] != "unknown"  # the machine was still checked
    assert by_id["shm-need"]["status"] == "unknown"


@pytest.mark.slow
def test_a_lazy_import_in_getitem_is_found_before_a_worker_dies_of_it(tmp_path: Path) -> None:
    dataset = tmp_path / "lazy.py"
    dataset.write_text(
        textwrap.dedent(
            """
            import torch

            class Lazy(torch.utils.data.Dataset):
                def __len__(self):
                    return 8

                def __getitem__(self, index):
                    import PIL.Image  # blocked in this test: each worker would die here
                    return torch.zeros(2)

            data = Lazy()
            """
        )
    )
    code, data, stderr = env_json(
        "--target", f"{dataset}:data", blocked=("PIL",), tmp_path=tmp_path
    )
    check = dependencies(data)
    assert (code, check["status"]) == (1, "fail"), stderr
    assert check["message"] == (
        "loaderdoctor needs PIL: ModuleNotFoundError: No module named 'PIL' (blocked) "
        "(from pillow); lazy.py imports PIL: ModuleNotFoundError: No module named 'PIL' (blocked)"
    )


def test_a_bug_in_one_check_is_counted_and_said_not_hidden_nor_fatal(monkeypatch) -> None:
    from loaderdoctor.env import core
    from loaderdoctor.report.env import format_text

    def broken(inputs: object) -> object:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setitem(core.CHECKS, "cpu", broken)
    report = core.run_env_checks()
    cpu = report.check("cpu")
    assert (cpu.status, cpu.message) == (
        "unknown",
        "loaderdoctor failed to measure this (ZeroDivisionError: division by zero); "
        "please report it",
    )
    assert report.internal_errors == ["cpu: ZeroDivisionError: division by zero"]
    lines = format_text(report, width=200).splitlines()
    assert lines[lines.index("loaderdoctor's own errors (a bug: please report it)") + 1] == (
        "  cpu: ZeroDivisionError: division by zero"
    )
    assert report.check("shm-size").status != "unknown"  # the other checks still ran
