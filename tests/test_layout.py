"""The supervised core's shape, stated as tests so that it stays.

- what crosses between a worker and the parent (the files it leaves, the recorder's row, the
  texts and tags the parent reads back) is spelled in one module, ``boundary.py``;
- no folder of the supervised core, nor of the renderers, holds more than 15 modules;
- no function takes the iterator as an untyped ``it: Any`` (the old respawn mixin's shape).
- no module keeps a worker context: each worker builds its own and hands it to its wrappers;
- what a worker is loading changes only through its ``Loading``'s methods, in one module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import loaderdoctor

SRC = Path(loaderdoctor.__file__).parent
FILES = SRC / "boundary.py"
# The spellings of the exchanged files: worker-{..}.log, hang-{..}, stackdump-, events-, tempdir-,
# bootstrap- (as a name, not a cause id such as "worker-hang").
EXCHANGED = re.compile(r"[\"'](?:worker-\{|hang-\{|stackdump-|events-|tempdir-|bootstrap-)")


def exchanged_names_in(source: str) -> list[int]:
    return [number for number, line in enumerate(source.splitlines(), 1) if EXCHANGED.search(line)]


def test_only_files_py_spells_the_files_workers_leave() -> None:
    assert exchanged_names_in(FILES.read_text(encoding="utf-8")), "the pattern no longer matches"
    found = {
        path.relative_to(SRC).as_posix(): lines
        for path in sorted(SRC.rglob("*.py"))
        # scan's and tune's trials name cgroups "worker-{pid}": no file a worker leaves
        if path != FILES and path.parts[-2] not in ("scan", "tune")
        if (lines := exchanged_names_in(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_only_boundary_py_spells_the_texts_and_offsets_that_cross() -> None:
    # The texts a worker writes and the parent reads back, and the recorder's row layout
    crossing = re.compile(
        r"[\"']\[loaderdoctor\] |[\"']loaderdoctor: (?:a batch could not|cannot be pickled|the "
        r"worker called exit)|in _stage_timer_loop|in _orphan_guard_loop|resource sharer could "
        r"not accept|^class (?:Field|Stage)\(IntEnum\)|\bfrom loaderdoctor\.recorder import _"
    )
    source = FILES.read_text(encoding="utf-8")
    assert len(crossing.findall(source)) >= 7, "the pattern no longer matches boundary.py"
    found = {
        path.relative_to(SRC).as_posix(): number
        for path in sorted(SRC.rglob("*.py"))
        if path != FILES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if crossing.search(line)
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
    assert counts.keys() == {
        "supervise",
        "supervise/parent",
        "supervise/torchdata",
        "supervise/worker",
    }
    assert max(counts.values()) <= 16, counts  # 15 modules and the __init__


def test_no_folder_of_the_renderers_holds_more_than_15_modules() -> None:
    report = SRC / "report"
    counts = {
        folder.relative_to(SRC).as_posix(): len(list(folder.glob("*.py")))
        for folder in [report, *report.iterdir()]
        if folder.is_dir() and (folder / "__init__.py").exists()
    }
    assert counts.keys() == {"report", "report/html"}
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


WORKER = SRC / "supervise" / "worker"


def worker_classes() -> set[str]:
    """The classes the worker side defines (a context, a wrapper, a policy...)."""
    return {
        node.name
        for path in sorted(WORKER.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
    }


def module_level_worker_objects(source: str, classes: set[str]) -> list[str]:
    """``NAME = Class(...)`` at a module's top level, of a class the worker side defines; and
    ``global`` statements (a function that writes a module's state)."""
    found = []
    for node in ast.parse(source).body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.Call):
            name = ast.unparse(value.func).rsplit(".", 1)[-1]
            if name in classes:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Global):
            found.append(f"{node.lineno}: global {', '.join(node.names)}")
    return found


def test_no_module_keeps_a_worker_context() -> None:
    # Each worker's context is built at its start and handed to its wrappers: a
    # module-level one was read and written by every wrapper, and shared by every loader of a
    # process (one loader's good structure became another's).
    classes = worker_classes()
    assert "SupervisedCollate" in classes, "the scan lost the worker classes"
    found = {
        path.relative_to(SRC).as_posix(): lines
        for path in sorted((SRC / "supervise").rglob("*.py"))
        if (lines := module_level_worker_objects(path.read_text(encoding="utf-8"), classes))
    }
    assert found == {}


def test_the_scan_finds_a_planted_module_level_context() -> None:
    classes = {"WorkerContext", "_WorkerState"}
    assert module_level_worker_objects("STATE = _WorkerState()\n", classes) == [
        "1: STATE = _WorkerState()"
    ]
    planted = "x: int = 1\n_CONTEXT: WorkerContext = context.WorkerContext(0)\n"
    assert module_level_worker_objects(planted, classes) == [
        "2: _CONTEXT: WorkerContext = context.WorkerContext(0)"
    ]
    writer = "def start(worker_id):\n    global _CONTEXT\n    _CONTEXT = make(worker_id)\n"
    assert module_level_worker_objects(writer, classes) == ["2: global _CONTEXT"]
    inside = "def f():\n    context = WorkerContext(0)\n    return context\n"
    assert module_level_worker_objects(inside, classes) == []


CONTEXT = SRC / "supervise" / "worker" / "context.py"
# What a collection's own methods change in place
MUTATORS = {"add", "append", "clear", "discard", "extend", "insert", "pop", "remove", "update"}


def loading_writes(source: str) -> list[str]:
    """Lines that set or change a field of a worker's ``loading`` from outside its methods:
    ``x.loading.f = ...``, ``x.loading.f += ...``, ``x.loading.f.append(...)``, and the same
    through a local ``loading``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
        ):
            targets = [node.func.value]
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Attribute) and _names_loading(target.value):
                found.append(f"{node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return found


def _names_loading(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "loading") or (
        isinstance(node, ast.Name) and node.id == "loading"
    )


def test_only_the_loading_object_changes_what_a_worker_is_loading() -> None:
    assert loading_writes(CONTEXT.read_text(encoding="utf-8")) == []  # its own: self.indices
    found = {
        path.relative_to(SRC).as_posix(): lines
        for path in sorted(SRC.rglob("*.py"))
        if (lines := loading_writes(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_scan_finds_a_planted_loading_write() -> None:
    planted = (
        "context.loading.indices = []\n"
        "self.context.loading.known_bad.add(3)\n"
        "context.loading.begin([1])\n"
        "loading.indices.append(2)\n"
    )
    assert loading_writes(planted) == [
        "1: context.loading.indices = []",
        "2: self.context.loading.known_bad.add(3)",
        "4: loading.indices.append(2)",
    ]
