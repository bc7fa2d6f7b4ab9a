"""Every handler that catches everything says why it must be that broad.

``except Exception`` around the user's code (a dataset, a collate_fn, an imported script) is how
loaderdoctor names what failed; around its own code it hides bugs. So each broad handler carries
its reason in a comment, on the ``except`` line or the first line of its body, and a narrow one
needs none.
"""

from __future__ import annotations

import ast
from pathlib import Path

import loaderdoctor

SRC = Path(loaderdoctor.__file__).parent
BROAD = {"Exception", "BaseException"}


def _is_broad(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in BROAD for t in types)


def broad_handlers_without_a_reason(source: str) -> list[int]:
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler) and _is_broad(node):
            said_on_line = "#" in lines[node.lineno - 1]
            said_below = lines[node.lineno].strip().startswith("#")
            if not (said_on_line or said_below):
                found.append(node.lineno)
    return found


def test_every_broad_handler_says_why() -> None:
    found = {
        path.relative_to(SRC).as_posix(): lines
        for path in sorted(SRC.rglob("*.py"))
        if (lines := broad_handlers_without_a_reason(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_scan_finds_a_silent_broad_handler() -> None:
    source = (
        "try:\n    f()\nexcept ValueError:\n    pass\n"
        "try:\n    f()\nexcept (OSError, Exception):\n    pass\n"
        "try:\n    f()\nexcept Exception:  # the user's code\n    pass\n"
        "try:\n    f()\nexcept:\n    # anything at all\n    pass\n"
        "try:\n    f()\nexcept BaseException:\n    raise\n"
    )
    assert broad_handlers_without_a_reason(source) == [7, 20]
