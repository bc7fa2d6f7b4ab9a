"""The supervised core's shape (issue 27), stated as tests so that it stays.

- the files a worker leaves for the parent are named in one module, ``supervise/files.py``;
- no folder of the supervised core holds more than 15 modules;
- no function takes the iterator as an untyped ``it: Any`` (the old respawn mixin's shape).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import loaderdoctor

SRC = Path(loaderdoctor.__file__).parent
FILES = SRC / "supervise" / "files.py"
# The spellings of the exchanged files: worker-{..}.log, hang-{..}, stackdump-, events-, tempdir-,
# bootstrap- (as a name, not a cause id such as "worker-hang").
EXCHANGED = re.compile(r"[\"'](?:worker-\{|hang-\{|stackdump-|events-|tempdir-|bootstrap-)")


def exchanged_names_in(source: str) -> list[int]:
    return [number for number, line in enumerate(source.splitlines(), 1) if EXCHANGED.search(line)]


def test_only_files_py_spells_the_files_workers_leave() -> None:
    assert exchanged_names_in(FILES.read_text(encoding="utf-8")), "the pattern no longer matches"
    found = {
        path.relative_to(SRC).as_posix(): lines
        for path in sorted((SRC / "supervise").rglob("*.py"))
        if path != FILES and (lines := exchanged_names_in(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_scan_finds_a_planted_file_name() -> None:
    planted = 'path = os.path.join(log_dir, f"tempdir-{worker_id}-{pid}.txt")\n'
    assert exchanged_names_in("x = 1\n" + planted) == [2]
    assert exchanged_names_in('cause = "worker-hang"\n') == []


def test_no_folder_of_the_supervised_core_holds_more_than_15_modules() -> None:
    core = SRC / "supervise"
    counts = {
        folder.relative_to(SRC).as_posix(): len([p for p in folder.glob("*.py")])
        for folder in [core, *core.iterdir()]
        if folder.is_dir() and (folder / "__init__.py").exists()
    }
    assert counts.keys() == {"supervise", "supervise/parent", "supervise/worker"}
    assert max(counts.values()) <= 16, counts  # 15 modules and the __init__


def test_no_function_takes_an_untyped_iterator() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for argument in node.args.args + node.args.kwonlyargs:
                    annotation = ast.unparse(argument.annotation) if argument.annotation else ""
                    if argument.arg == "it" and annotation in ("", "Any"):
                        found.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name}")
    assert found == []
