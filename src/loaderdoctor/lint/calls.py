"""The project's call graph: which project functions a function calls, across modules and classes.

Rules start from a function (a Dataset's ``__getitem__``, a call made at import time) and ask what
it reaches. An edge is one call a reader can resolve:

- ``helper(x)``, ``utils.helper(x)``, ``from .io import helper``: a function of any project module;
- ``self.method()`` (dispatched from the most derived Dataset class) and ``super().method()``;
- ``self.attr.method()`` and ``self.attr(...)``, where ``__init__`` stored an instance of a project
  class in ``self.attr``, built there or passed in by the code that constructs the object
  (``MosaicDetection(dataset=COCODataset(...), preproc=TrainTransform())``);
- ``Helper(...)``: the class's ``__init__``.

Anything else (a library, a value only known at run time) is not an edge: the graph stays what a
careful reader can tell.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from loaderdoctor.lint.model import _FUNCTIONS, DatasetClass, FunctionNode, ModuleModel
from loaderdoctor.lint.scope import dotted_name, is_self_attribute, walk_local


class ProjectIndex(Protocol):
    """The questions the call graph asks of the project that owns it (answered by
    :class:`loaderdoctor.lint.project.Project`, which imports this module, not the other way)."""

    def resolve(
        self,
        module: ModuleModel,
        node: ast.AST,
        depth: int = 0,
        hint: re.Pattern[str] | None = None,
    ) -> tuple[ModuleModel, ast.AST] | None: ...

    def class_of_instance(
        self, module: ModuleModel, node: ast.AST | None, depth: int = 0
    ) -> tuple[ModuleModel, ast.ClassDef] | None: ...

    def constructions(
        self, module: ModuleModel, cls: ast.ClassDef | FunctionNode
    ) -> list[tuple[ModuleModel, ast.Call]]: ...

    def dataset_of(self, node: ast.ClassDef) -> DatasetClass | None: ...

    def values_of(
        self, module: ModuleModel, node: ast.Name, depth: int = 0
    ) -> list[tuple[ModuleModel, ast.AST]]: ...

    def module_classes(
        self, module: ModuleModel, node: ast.AST
    ) -> list[tuple[ModuleModel, ast.ClassDef]]: ...


MAX_DEPTH = 5
_FAN_OUT = 16  # callees followed from one call: enough for a dict of augmentations


@dataclass(frozen=True, eq=False)
class Caller:
    """A function with the class it runs in (to resolve ``self``), if any."""

    module: ModuleModel
    function: FunctionNode
    cls: ast.ClassDef | None = None
    dataset: DatasetClass | None = None  # for dispatch from the most derived Dataset class
    # The class of the object the method runs on, when it inherits the method: its own
    # __init__ says what self.x holds (DefaultAug(ImgAug) sets the augmenters ImgAug calls).
    instance: tuple[ModuleModel, ast.ClassDef] | None = None

    @property
    def name(self) -> str:
        prefix = f"{self.cls.name}." if self.cls is not None else ""
        return f"{prefix}{self.function.name}"


@dataclass(frozen=True, eq=False)
class Edge:
    call: ast.Call  # in the calling function
    callee: Caller


@dataclass(frozen=True, eq=False)
class Path:
    """How a function is reached from a start: the edges taken, first call first."""

    edges: tuple[Edge, ...]

    @property
    def end(self) -> Caller | None:
        return self.edges[-1].callee if self.edges else None

    def describe(self) -> str:
        """``self.pull_item()`` -> ``load_resized_img()``, in words for a message."""
        return " -> ".join(f"`{edge.callee.name}()`" for edge in self.edges)


class CallGraph:
    """Edges computed on demand and cached, over every module of one project."""

    def __init__(self, project: ProjectIndex) -> None:
        self.project = project
        self._edges: dict[int, list[Edge]] = {}
        self._values: dict[tuple[int, str], list[tuple[ModuleModel, ast.expr]]] = {}

    def callees(self, caller: Caller) -> list[Edge]:
        key = id(caller.function)
        found = self._edges.get(key)
        if found is None:
            found = self._edges[key] = list(self._resolve_calls(caller))
        return found

    def reach(self, start: Caller, max_depth: int = MAX_DEPTH) -> Iterator[tuple[Caller, Path]]:
        """Every function reachable from ``start`` (itself first), breadth first, each once."""
        seen = {id(start.function)}
        frontier: list[tuple[Caller, Path]] = [(start, Path(()))]
        depth = 0
        while frontier:
            yield from frontier
            if depth >= max_depth:
                return
            depth += 1
            following: list[tuple[Caller, Path]] = []
            for caller, path in frontier:
                for edge in self.callees(caller):
                    if id(edge.callee.function) in seen:
                        continue
                    seen.add(id(edge.callee.function))
                    following.append((edge.callee, Path((*path.edges, edge))))
            frontier = following

    # -- resolution ------------------------------------------------------------------------

    def _resolve_calls(self, caller: Caller) -> Iterator[Edge]:
        for node in walk_local(caller.function):
            if isinstance(node, ast.Call):
                for callee in self._callees(caller, node.func):
                    yield Edge(node, callee)

    def _callees(self, caller: Caller, func: ast.expr) -> list[Caller]:
        """Every project function a call may run: one per class ``self.attr`` may hold (each
        construction of the owner passes its own), one per function a dict or list of them
        holds (``OPERATIONS[name](image)``), one per object a loop walks over (``for step in
        self.steps: step(image)``)."""
        if is_self_attribute(func) or (
            isinstance(func, ast.Attribute) and is_self_attribute(func.value)
        ):
            assert isinstance(func, ast.Attribute)
            own = self._callee(caller, func) if is_self_attribute(func) else None
            if own is not None:  # self.load(index): a method of the class
                return [own]
            attr, method = (
                (func.attr, "__call__") if is_self_attribute(func) else (func.value.attr, func.attr)  # type: ignore[attr-defined]
            )
            found = [
                self.method(module, cls, method)
                for module, cls in self.attribute_classes(caller, attr)
            ]
            callees = [callee for callee in found if callee is not None]
            if not callees and method == "__call__":  # self.transform = Compose([...])
                for module, value in self.attribute_values(caller, attr):
                    holder = Caller(module, caller.function, caller.cls, caller.dataset)
                    callees.extend(self._held_callees(holder, value, 1))
            return callees[:_FAN_OUT]
        if isinstance(func, ast.Subscript) or (
            isinstance(func, ast.Name) and not self._is_definition(caller, func)
        ):
            return self._held_callees(caller, func, 0)[:_FAN_OUT]
        callee = self._callee(caller, func)
        return [callee] if callee is not None else []

    def _is_definition(self, caller: Caller, func: ast.Name) -> bool:
        return self.project.resolve(caller.module, func) is not None

    def _held_callees(self, caller: Caller, node: ast.AST, depth: int) -> list[Caller]:
        """The project functions and callable objects ``node`` may be, followed through the
        values of names, the entries of dict and list literals, loop variables and the
        elements of what the loop walks, and ``getattr(module, name)`` of a project module."""
        if depth > 4:
            return []
        module = caller.module
        found: list[Caller] = []
        if isinstance(node, ast.Name):
            if node.id == "self":
                return []
            for owner, value in self.project.values_of(module, node):
                if isinstance(value, _FUNCTIONS):
                    found.append(Caller(owner, value))
                elif isinstance(value, ast.ClassDef):
                    init = self.method(owner, value, "__init__")
                    found.extend([init] if init else [])
                elif isinstance(value, (ast.For, ast.comprehension)):
                    walked = Caller(owner, caller.function, caller.cls, caller.dataset)
                    found.extend(self._element_callees(walked, value.iter, depth + 1))
                elif isinstance(value, ast.expr) and owner is module:
                    found.extend(self._held_callees(caller, value, depth + 1))
                elif isinstance(value, ast.expr):
                    found.extend(
                        self._held_callees(Caller(owner, caller.function), value, depth + 1)
                    )
        elif isinstance(node, ast.Subscript):
            found.extend(self._element_callees(caller, node.value, depth + 1))
        elif isinstance(node, ast.Call) and _composes(module, node):
            found.extend(self._element_callees(caller, node.args[0], depth + 1))
        elif isinstance(node, ast.Call):  # an instance: its __call__
            for owner, cls in self._instance_classes(caller, node):
                method = self.method(owner, cls, "__call__")
                found.extend([method] if method else [])
        elif isinstance(node, ast.Attribute):
            callee = self._callee(caller, node)
            found.extend([callee] if callee else [])
        return found

    def _element_callees(self, caller: Caller, container: ast.AST, depth: int) -> list[Caller]:
        """What calling an element of ``container`` may run."""
        if depth > 4:
            return []
        elements: list[ast.AST] = []
        if isinstance(container, ast.Dict):
            elements = [value for value in container.values if value is not None]
        elif isinstance(container, (ast.List, ast.Tuple, ast.Set)):
            elements = list(container.elts)
        elif isinstance(container, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            elements = [container.elt]
        elif isinstance(container, ast.DictComp):
            elements = [container.value]
        elif isinstance(container, ast.Name):
            for owner, value in self.project.values_of(caller.module, container):
                if isinstance(value, ast.expr):
                    found = self._element_callees(
                        Caller(owner, caller.function, caller.cls, caller.dataset), value, depth + 1
                    )
                    if found:
                        return found
            return []
        elif is_self_attribute(container):
            assert isinstance(container, ast.Attribute)
            found = []
            for owner, value in self.attribute_values(caller, container.attr):
                found.extend(
                    self._element_callees(
                        Caller(owner, caller.function, caller.cls, caller.dataset), value, depth + 1
                    )
                )
            return found
        callees: list[Caller] = []
        for element in elements:
            callees.extend(self._held_callees(caller, element, depth + 1))
        return callees

    def _instance_classes(
        self, caller: Caller, node: ast.Call
    ) -> list[tuple[ModuleModel, ast.ClassDef]]:
        """The project classes a call builds, ``getattr(module, name)(...)`` of a project
        module giving every class defined (or star-imported) there."""
        found = self.project.class_of_instance(caller.module, node)
        if found is not None:
            return [found]
        inner = node.func
        if (
            isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Name)
            and inner.func.id == "getattr"
            and inner.args
        ):
            return self.project.module_classes(caller.module, inner.args[0])
        return []

    def _callee(self, caller: Caller, func: ast.expr) -> Caller | None:
        if isinstance(func, ast.Attribute):
            receiver = func.value
            if isinstance(receiver, ast.Name) and receiver.id == "self":
                return self._method_of_self(caller, func.attr)
            if isinstance(receiver, ast.Call) and _is_super(receiver):
                return self._method_of_bases(caller, func.attr)
        found = self.project.resolve(caller.module, func)
        if found is None:
            return None
        module, definition = found
        if isinstance(definition, _FUNCTIONS):
            owner = caller.module.scopes.enclosing(definition, (ast.ClassDef,))
            if owner is not None and module is caller.module:
                return None  # a method's own name inside its class: not a call of it
            return Caller(module, definition)
        if isinstance(definition, ast.ClassDef):
            return self.method(module, definition, "__init__")
        return None

    def _method_of_self(self, caller: Caller, name: str) -> Caller | None:
        if caller.dataset is not None:
            found = caller.dataset.find(name)
            if found is not None:
                function, owner = found
                return Caller(owner.module, function, owner.node, caller.dataset)
            return None
        if caller.cls is not None:
            return self.method(caller.module, caller.cls, name)
        return None

    def _method_of_bases(self, caller: Caller, name: str) -> Caller | None:
        if caller.cls is None:
            return None
        for base in caller.cls.bases:
            resolved = self.project.resolve(caller.module, base)
            if resolved is not None and isinstance(resolved[1], ast.ClassDef):
                found = self.method(resolved[0], resolved[1], name)
                if found is not None:
                    return Caller(found.module, found.function, found.cls, caller.dataset)
        return None

    def method(
        self,
        module: ModuleModel,
        cls: ast.ClassDef,
        name: str,
        depth: int = 0,
        instance: tuple[ModuleModel, ast.ClassDef] | None = None,
    ) -> Caller | None:
        """``cls.name`` looked up through the project's base classes."""
        for statement in cls.body:
            if isinstance(statement, _FUNCTIONS) and statement.name == name:
                inherited = instance if instance is not None and instance[1] is not cls else None
                return Caller(module, statement, cls, self.project.dataset_of(cls), inherited)
        if depth > 8:
            return None
        for base in cls.bases:
            resolved = self.project.resolve(module, base)
            if resolved is not None and isinstance(resolved[1], ast.ClassDef):
                if resolved[1] is not cls:
                    found = self.method(
                        resolved[0], resolved[1], name, depth + 1, instance or (module, cls)
                    )
                    if found is not None:
                        return found
        return None

    # -- attribute and argument flow -------------------------------------------------------

    def attribute_values(self, caller: Caller, attr: str) -> list[tuple[ModuleModel, ast.expr]]:
        """What ``self.attr`` is set to in ``__init__``, following its parameters to the
        arguments every project call of the class passes (the caller's module with each)."""
        if caller.cls is None:
            return []
        owner = caller.instance[1] if caller.instance is not None else caller.cls
        key = (id(owner), attr)
        found = self._values.get(key)
        if found is None:
            found = self._values[key] = list(self._attribute_values(caller, attr))
        return found

    def _attribute_values(
        self, caller: Caller, attr: str
    ) -> Iterator[tuple[ModuleModel, ast.expr]]:
        assert caller.cls is not None
        module, cls = caller.instance or (caller.module, caller.cls)
        init = self.method(module, cls, "__init__")
        if init is None:
            return
        parameters = _parameters(init.function)
        for node in walk_local(init.function):
            if not isinstance(node, ast.Assign):
                continue
            if not any(is_self_attribute(t, attr) for t in node.targets):
                continue
            value = node.value
            if isinstance(value, ast.Name) and value.id in parameters:
                position = parameters.index(value.id)
                for where, call in self.project.constructions(module, cls):
                    argument = _argument(call, value.id, position)
                    if argument is not None:
                        yield where, argument
            else:
                yield init.module, value

    def attribute_classes(
        self, caller: Caller, attr: str
    ) -> Iterator[tuple[ModuleModel, ast.ClassDef]]:
        """The project classes whose instances ``self.attr`` may hold."""
        seen: set[int] = set()
        for module, value in self.attribute_values(caller, attr):
            found = self.project.class_of_instance(module, value)
            if found is not None and id(found[1]) not in seen:
                seen.add(id(found[1]))
                yield found


# Library transforms that call, in turn, the transforms they are given as their first
# argument (torchvision's and albumentations' Compose, nn.Sequential, RandomApply...).
_COMPOSERS = frozenset({"Compose", "Sequential", "RandomApply", "RandomChoice", "RandomOrder"})


def _composes(module: ModuleModel, call: ast.Call) -> bool:
    name = (module.scopes.qualified(call.func) or dotted_name(call.func) or "").split(".")[-1]
    return name in _COMPOSERS and bool(call.args)


def _is_super(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Name) and node.func.id == "super"


def _parameters(function: FunctionNode) -> list[str]:
    """Positional parameter names after ``self``, then keyword-only ones."""
    arguments = function.args
    names = [arg.arg for arg in (*arguments.posonlyargs, *arguments.args)][1:]
    return names + [arg.arg for arg in arguments.kwonlyargs]


def _argument(call: ast.Call, name: str, position: int) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    if position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args):
        return call.args[position]
    return None


def bind_arguments(call: ast.Call, function: FunctionNode, method: bool) -> dict[str, ast.expr]:
    """Parameter name -> the argument expression this call passes for it."""
    arguments = function.args
    names = [arg.arg for arg in (*arguments.posonlyargs, *arguments.args)]
    if method:
        names = names[1:]
    bound: dict[str, ast.expr] = {}
    for position, argument in enumerate(call.args):
        if isinstance(argument, ast.Starred):
            break
        if position < len(names):
            bound[names[position]] = argument
    for keyword in call.keywords:
        if keyword.arg is not None:
            bound[keyword.arg] = keyword.value
    return bound
