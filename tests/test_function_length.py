"""No function in ``src/`` runs over 60 lines: one that does is split where a name explains a part.

Counted from ``def`` to the function's last line (docstring and comments included), as a reader
scrolls it. Nested functions count on their own and inside their parent.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
MAX_LINES = 60


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int]]:
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                found.append((name, node.end_lineno - node.lineno + 1))
            found.extend(_functions(node, f"{name}."))
        else:
            found.extend(_functions(node, prefix))
    return found


def long_functions() -> dict[str, int]:
    lengths = {}
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC).as_posix()
        for name, lines in _functions(ast.parse(path.read_text(), str(path))):
            if lines > MAX_LINES:
                lengths[f"{where}:{name}"] = lines
    return lengths


def test_no_function_in_src_is_over_60_lines() -> None:
    assert long_functions() == {}, "split these where a name explains a part"


def test_the_count_reads_functions_methods_and_nested_functions() -> None:
    source = "class A:\n    def f(self):\n        def g():\n" + "            pass\n" * 61
    assert _functions(ast.parse(source)) == [("A.f", 63), ("A.f.g", 62)]
