"""The test suite's own hygiene, stated as tests so that it stays.

- a test runs the interpreter it runs under (``sys.executable``), never a ``python`` found on PATH:
  on a machine whose PATH names another Python (or none), such a test measures the wrong thing;
- a test module that needs an extra (torchdata) imports it where it can skip, never at the top
  of the module: without the extra the whole suite would stop at collection.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).parent
INTERPRETERS = {"python", "python3"}
EXTRAS = {"torchdata"}
# Calls that start a process: run_python, subprocess.run, Popen, check_output, ld_run, ...
STARTS = re.compile(r"run|Popen|check_|call")


def _modules() -> list[Path]:
    return [path for path in sorted(TESTS.rglob("*.py")) if "lint_corpus" not in path.parts]


def python_from_path(source: str) -> list[int]:
    """Lines of a command list handed to a call that starts a process, naming a bare python."""
    found = []
    for call in ast.walk(ast.parse(source)):
        if not isinstance(call, ast.Call) or not STARTS.search(ast.unparse(call.func)):
            continue
        for node in ast.walk(call):
            if not isinstance(node, ast.List):
                continue
            words = [item.value for item in node.elts if isinstance(item, ast.Constant)]
            if any(word in INTERPRETERS for word in words):
                found.append(node.lineno)
    return sorted(set(found))


def extras_at_the_top(source: str) -> list[int]:
    """Top-level imports of an extra not preceded by a top-level ``pytest.importorskip``."""
    lines = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Expr) and "importorskip" in ast.unparse(node):
            return lines
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        if any(name.split(".")[0] in EXTRAS for name in names):
            lines.append(node.lineno)
    return lines


def test_no_test_runs_a_python_from_path() -> None:
    found = {
        path.relative_to(TESTS).as_posix(): lines
        for path in _modules()
        if (lines := python_from_path(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_no_test_module_imports_an_extra_at_its_top() -> None:
    found = {
        path.relative_to(TESTS).as_posix(): lines
        for path in _modules()
        if "fixtures" not in path.parts and "stacks" not in path.parts
        if (lines := extras_at_the_top(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_scans_find_planted_lines() -> None:
    planted = 'run_python(["-m", "loaderdoctor", "run", "--", "python", "train.py"])\n'
    assert python_from_path("x = 1\n" + planted) == [2]
    assert python_from_path('command = ["python", "train.py"]\n') == []  # data, not run
    assert python_from_path('resolve(["--", "python3", "x.py"])\n') == []
    assert extras_at_the_top('pytest.importorskip("torchdata")\nimport torchdata\n') == []
    assert extras_at_the_top("import os\nfrom torchdata.nodes import Loader\n") == [2]
    assert extras_at_the_top("def f():\n    import torchdata\n") == []
