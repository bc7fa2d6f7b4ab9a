"""CPython's private names, reached only through ``cpython_compat``: each one checked on the running
interpreter, and no other module of ours reaching one."""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import multiprocessing
import multiprocessing.queues
import multiprocessing.resource_sharer
import sys
from pathlib import Path
from typing import Any

import pytest

import loaderdoctor
from loaderdoctor import cpython_compat

SRC = Path(loaderdoctor.__file__).parent
COMPAT_MODULES = {"cpython_compat.py", "torch_compat.py", "torchdata_compat.py"}
# Private names of our own objects that modules read on objects other than ``self``, and names
# that are documented though they start with "_" (``os._exit``, namedtuples' and ast's ``_fields``).
OURS = {
    "_incidents",
    "_find_in_bases",
    "_is_loader",
    "_loader",
    "_command",
    "_applied",
    "_fields",
    "_exit",
}
# A data library's own private, read only in the module that adapts to that library, guarded
# (a layout it does not know names nothing): litdata's cache reader, HF datasets' row indices.
LIBRARY_PRIVATES = {
    "supervise/worker/library_names.py": {"_reader"},
    "supervise/samples.py": {"_indices"},
}


def _owner_instance(owner: str) -> Any:
    """An object on which ``owner``'s name is looked up: the module, or an instance where the
    name is set in ``__init__``."""
    if owner == "multiprocessing.queues.Queue":
        return multiprocessing.Queue()
    if owner == "multiprocessing.process.BaseProcess":
        return multiprocessing.current_process()
    if owner == "multiprocessing.resource_sharer._ResourceSharer":
        return multiprocessing.resource_sharer._ResourceSharer()  # type: ignore[attr-defined]
    if owner == "multiprocessing.synchronize.Semaphore":
        return multiprocessing.BoundedSemaphore(3)
    if owner == "argparse.ArgumentParser":
        return argparse.ArgumentParser()
    return importlib.import_module(owner)


@pytest.mark.parametrize(
    ("owner", "name"),
    cpython_compat.PRIVATE_NAMES,
    ids=[n for _, n in cpython_compat.PRIVATE_NAMES],
)
def test_each_private_name_is_on_this_interpreter(owner: str, name: str) -> None:
    if name == "_inheriting":  # set only while a spawned child bootstraps: spawn's own source
        source = inspect.getsource(importlib.import_module("multiprocessing.spawn"))
        assert "process.current_process()._inheriting = True" in source
        return
    assert hasattr(_owner_instance(owner), name), (
        f"{owner}.{name} is gone from Python {sys.version}"
    )


def test_the_feeder_error_hook_is_called_as_compat_calls_it() -> None:
    hook = inspect.getattr_static(multiprocessing.queues.Queue, "_on_queue_feeder_error")
    assert isinstance(hook, staticmethod)
    assert list(inspect.signature(hook.__func__).parameters) == ["e", "obj"]
    assert cpython_compat.feeder_error_hook() is hook.__func__


def test_the_accessors_read_what_they_name() -> None:
    queue: Any = multiprocessing.Queue()
    try:
        assert cpython_compat.queue_reader(queue).poll(0) is False
        assert cpython_compat.queue_read_lock(queue).acquire(timeout=1)
        cpython_compat.queue_read_lock(queue).release()
    finally:
        queue.close()
        queue.join_thread()
    assert isinstance(cpython_compat.temp_dir_inherited(), bool)
    assert cpython_compat.caller_frame(0).f_code.co_name == inspect.currentframe().f_code.co_name  # type: ignore[union-attr]
    parser = argparse.ArgumentParser()
    parser.add_subparsers().add_parser("scan")
    assert list(cpython_compat.subcommand_parsers(parser).choices) == ["scan"]
    assert cpython_compat.semaphore_slots(multiprocessing.BoundedSemaphore(3)) == 3
    sharer = cpython_compat.resource_sharer_class()
    assert cpython_compat.sharer_serve(sharer) is inspect.getattr_static(sharer, "_serve")


def stdlib_privates_in(source: str) -> list[str]:
    """Every ``x._name`` (not a dunder) on an object other than ``self``/``cls`` and not a name
    of our own; ``getattr(x, "_name")`` too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            name, owner = node.attr, ast.unparse(node.value)
            if owner in ("self", "cls") or owner.startswith("self."):
                continue
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("getattr", "setattr", "hasattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            name = node.args[1].value
        else:
            continue
        if name.startswith("_") and not name.startswith("__") and not name.startswith("_ld"):
            if name not in OURS:
                found.append(f"line {node.lineno}: {name}")
    return found


def _not_allowed(path: Path, hits: list[str]) -> list[str]:
    allowed = LIBRARY_PRIVATES.get(path.relative_to(SRC).as_posix(), set())
    return [hit for hit in hits if hit.split(": ", 1)[1] not in allowed]


def test_no_module_but_the_compat_modules_reaches_a_private_name() -> None:
    found = {
        path.relative_to(SRC).as_posix(): hits
        for path in sorted(SRC.rglob("*.py"))
        if path.name not in COMPAT_MODULES and "_boot" not in path.parts
        if (hits := _not_allowed(path, stdlib_privates_in(path.read_text(encoding="utf-8"))))
    }
    assert found == {}


@pytest.mark.parametrize(
    ("planted", "name"),
    [
        ("reader = result_queue._reader\n", "_reader"),
        ("frame = sys._getframe(1)\n", "_getframe"),
        ("sharer = getattr(resource_sharer, '_ResourceSharer', None)\n", "_ResourceSharer"),
    ],
)
def test_the_scan_finds_a_planted_private(planted: str, name: str) -> None:
    assert stdlib_privates_in("import sys\n" + planted) == [f"line 2: {name}"]
    assert stdlib_privates_in("self._reader = 1\nloader._ld_supervisor = 2\n") == []
