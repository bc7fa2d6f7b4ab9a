"""The objects a Dataset keeps, one or two attributes down, and the ``self.x = value`` facts
of any class: what LD106 and LD109 look into beyond the Dataset's own attributes
(``self.transform = Compose([RandomJitter()])``, ``self.reader = H5Reader(path)``)."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass

from loaderdoctor.lint.calls import Caller
from loaderdoctor.lint.model import DatasetClass, ModuleModel
from loaderdoctor.lint.project import Project
from loaderdoctor.lint.scope import is_self_attribute, walk_local

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def self_assignments(function: ast.AST) -> tuple[tuple[str, ast.expr, ast.Assign], ...]:
    """``self.x = value`` in ``function`` (not in nested ones): (x, value, statement)."""
    return _self_assignments(function)


# Several rules ask this of the same ``__init__`` (and of every class a Dataset holds); a node is
# keyed by identity, and a lint run holds a few thousand functions at most.
@functools.lru_cache(maxsize=4096)
def _self_assignments(function: ast.AST) -> tuple[tuple[str, ast.expr, ast.Assign], ...]:
    found = []
    for node in walk_local(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if is_self_attribute(target):
                    assert isinstance(target, ast.Attribute)
                    found.append((target.attr, node.value, node))
    return tuple(found)


@dataclass(frozen=True)
class HeldObject:
    """An instance of a project class that a Dataset keeps, one or two attributes down."""

    module: ModuleModel
    cls: ast.ClassDef
    path: str  # "transform" or "transform.mask_func", from the Dataset's self
    user: str  # the worker method that reads the Dataset's attribute


def held_objects(project: Project, dataset: DatasetClass) -> tuple[HeldObject, ...]:
    """Project objects the Dataset keeps in ``self.x`` and uses in a worker, and the project
    objects those keep in turn (``self.transform = Aug()``, ``Aug.__init__``:
    ``self.mask_func = MaskFunc()``), whether built in ``__init__`` or passed to it."""
    return _held_objects(project, dataset)


# LD106 and LD109 both ask, for every Dataset of a run (keyed by identity; a run is one project).
@functools.lru_cache(maxsize=256)
def _held_objects(project: Project, dataset: DatasetClass) -> tuple[HeldObject, ...]:
    return tuple(_find_held_objects(project, dataset))


def _find_held_objects(project: Project, dataset: DatasetClass) -> Iterator[HeldObject]:
    read = _worker_reads(dataset)
    seen: set[int] = set()
    for function, owner in dataset.init_methods():
        caller = Caller(owner.module, function, owner.node, dataset)
        attrs = {attr for attr, value, _ in self_assignments(function) if _may_hold(value)}
        for attr in sorted(attrs & read.keys()):
            user = read[attr]
            for module, value in project.graph.attribute_values(caller, attr):
                for held_module, cls in _classes_of(project, module, value):
                    if id(cls) in seen:
                        continue
                    seen.add(id(cls))
                    held = HeldObject(held_module, cls, attr, user)
                    yield held
                    yield from _inner_objects(project, held, seen)


def _worker_reads(dataset: DatasetClass) -> dict[str, str]:
    """``self.x`` read in a worker method -> the first such method's name."""
    read: dict[str, str] = {}
    for function, _ in dataset.worker_methods():
        for node in walk_local(function):
            if is_self_attribute(node) and isinstance(getattr(node, "ctx", None), ast.Load):
                assert isinstance(node, ast.Attribute)
                read.setdefault(node.attr, function.name)
    return read


def _may_hold(value: ast.expr) -> bool:
    """Whether ``self.x = value`` may keep an object: a call, a name, a choice of them."""
    return isinstance(value, (ast.Call, ast.Name, ast.IfExp, ast.BoolOp))


def _inner_objects(project: Project, held: HeldObject, seen: set[int]) -> Iterator[HeldObject]:
    """The project objects a held object keeps in turn (one level more)."""
    init = project.graph.method(held.module, held.cls, "__init__")
    if init is None:
        return
    caller = Caller(init.module, init.function, held.cls, None)
    for attr, _, _ in self_assignments(init.function):
        for module, value in project.graph.attribute_values(caller, attr):
            for inner_module, cls in _classes_of(project, module, value):
                if id(cls) not in seen:
                    seen.add(id(cls))
                    yield HeldObject(inner_module, cls, f"{held.path}.{attr}", held.user)


def _classes_of(
    project: Project, model: ModuleModel, value: ast.AST
) -> list[tuple[ModuleModel, ast.ClassDef]]:
    """The project classes ``value`` builds, alone or listed in a Compose."""
    if (
        isinstance(value, ast.Call)
        and value.args
        and isinstance(value.args[0], (ast.List, ast.Tuple))
    ):
        found = project.classes_of_instance(model, value)
        if found:
            return found
        return [c for e in value.args[0].elts for c in project.classes_of_instance(model, e)]
    return project.classes_of_instance(model, value)


def own_assignments(project: Project, held: HeldObject) -> Iterator[tuple[str, ast.expr]]:
    init = project.graph.method(held.module, held.cls, "__init__")
    if init is not None and init.cls is held.cls:
        for attr, value, _ in self_assignments(init.function):
            yield attr, value


def drawn_in(held: HeldObject, attr: str) -> bool:
    """Whether a method of the held class other than ``__init__`` reads ``self.attr``."""
    for statement in held.cls.body:
        if isinstance(statement, _FUNCTIONS) and statement.name != "__init__":
            for node in walk_local(statement):
                if is_self_attribute(node, attr) and isinstance(
                    getattr(node, "ctx", None), ast.Load
                ):
                    return True
    return False
