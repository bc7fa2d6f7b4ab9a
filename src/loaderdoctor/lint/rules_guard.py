"""LD101: DataLoader workers started when the module is imported, outside the main guard.

Every statement that runs at import counts, not only bare calls: the bodies of top-level
``for``/``while``/``with``/``try`` blocks, the right-hand side of assignments, and module functions
called from there that iterate a DataLoader (built in the function or at module level, alone or
in a dict/list comprehension such as ``{split: DataLoader(...) for split in splits}``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from loaderdoctor.lint.calls import Caller
from loaderdoctor.lint.model import Hit, LoaderCall, ModuleModel, Placement
from loaderdoctor.lint.project import Project, spawn_severity, spawn_where
from loaderdoctor.lint.scope import dotted_name, walk_local

# Calls that look at a DataLoader without starting its workers.
_HARMLESS_CONSUMERS = frozenset(
    {"len", "print", "isinstance", "type", "id", "repr", "str", "hasattr", "getattr", "setattr"}
)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_CONTAINERS = (
    ast.List,
    ast.Tuple,
    ast.Set,
    ast.Dict,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
    ast.IfExp,
    ast.Starred,
)
_MAX_CALL_DEPTH = 4


def check_main_guard(project: Project) -> Iterator[Hit]:
    for model in project.modules:
        # A notebook's __main__ cannot be re-imported by a spawned worker: LD102 says so instead.
        if not model.notebook:
            yield from _module_hits(project, model)


def _module_hits(project: Project, model: ModuleModel) -> Iterator[Hit]:
    candidates = _candidates(project, model)
    holders = _module_holders(model, candidates)
    uses = _holder_uses(model, holders)
    for loader in candidates:
        if model.placement(loader.node) is not Placement.UNGUARDED:
            continue
        if model.scopes.scope_of(loader.node) is not model.tree:
            continue
        if _consumed_at_top_level(model, loader, holders, uses):
            yield Hit(
                model,
                loader.node,
                "LD101",
                f"DataLoader with num_workers={loader.workers_text} is created and iterated at "
                'module top level without an `if __name__ == "__main__":` guard: each spawned '
                "worker re-imports the script and starts workers again while bootstrapping, "
                f"which fails {spawn_where(project, loader)}",
                severity=spawn_severity(project, loader),
            )
    cache: dict[int, tuple[LoaderCall, ModuleModel] | None] = {}
    for node in _import_time_calls(model):
        found = project.function(model, node.func)
        if found is not None:
            started = _starts_workers(project, found[0], found[1], 0, cache)
        else:
            started = _method_starts_workers(project, model, node)
        if started is None:
            continue
        loader, where = started
        line = f"line {loader.node.lineno}"
        if where is not model:
            line += f" of {where.path}"
        name = dotted_name(node.func)
        yield Hit(
            model,
            node,
            "LD101",
            f"`{name}()` runs at import time and iterates a DataLoader with num_workers="
            f"{loader.workers_text} ({line}), outside an "
            '`if __name__ == "__main__":` guard: each spawned worker re-imports the script '
            f"and runs it again, which fails {spawn_where(project, loader)}",
            severity=spawn_severity(project, loader),
        )
    yield from _factory_hits(project, model)


def _factory_hits(project: Project, model: ModuleModel) -> Iterator[Hit]:
    """``loader = get_loader(opt)`` (or ``CreateDataLoader(opt).load_data()``) at import time,
    then iterated there: a DataLoader that a project function or method returns."""
    loads: dict[str, list[ast.Name]] | None = None
    for statement in model.tree.body:
        if not isinstance(statement, ast.Assign) or not isinstance(statement.value, ast.Call):
            continue
        names = [t.id for t in statement.targets if isinstance(t, ast.Name)]
        if not names or model.placement(statement) is not Placement.UNGUARDED:
            continue
        if loads is None:
            loads = _top_level_loads(model)
        uses = [
            node
            for name in names
            for node in loads.get(name, ())
            if node.lineno > statement.lineno and model.placement(node) is Placement.UNGUARDED
        ]
        if not any(_consumes(model, use) for use in uses):
            continue
        found = returned_loader(project, model, statement.value, 0)
        if found is None:
            continue
        loader, where = found
        line = f"line {loader.node.lineno}" + (f" of {where.path}" if where is not model else "")
        yield Hit(
            model,
            statement.value,
            "LD101",
            f"`{model.segment(statement.value.func)}()` returns a DataLoader with num_workers="
            f"{loader.workers_text} ({line}), which is iterated at module top level without an "
            '`if __name__ == "__main__":` guard: each spawned worker re-imports the script and '
            f"starts workers again while bootstrapping, which fails {spawn_where(project, loader)}",
            severity=spawn_severity(project, loader),
        )


def _method_starts_workers(
    project: Project, model: ModuleModel, call: ast.Call
) -> tuple[LoaderCall, ModuleModel] | None:
    """``trainer.train()`` at import time, where ``trainer`` is a project object whose class
    keeps a worker DataLoader in ``self.x`` (``self.dataloader = cycle(DataLoader(...))``) and
    the method iterates it (``next(self.dataloader)``, ``for batch in self.loader``)."""
    if not isinstance(call.func, ast.Attribute):
        return None
    owner = _instance_class(project, model, call.func.value, 0)
    method = _method(project, owner[0], owner[1], call.func.attr, 0) if owner else None
    if method is None:
        return None
    where, function, cls = method
    loaders = {id(loader.node): loader for loader in _candidates(project, where)}
    stored: dict[str, LoaderCall] = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = dotted_name(node.targets[0]) or ""
            if not target.startswith("self."):
                continue
            for inner in ast.walk(node.value):
                if id(inner) in loaders:
                    stored.setdefault(target, loaders[id(inner)])
            if target not in stored and isinstance(node.value, ast.Call):
                # self.train_loader = build_loader(cfg): a project factory's DataLoader
                found = returned_loader(project, where, node.value, 1)
                if found is not None:
                    stored[target] = found[0]
    for node in walk_local(function):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            loader = stored.get(dotted_name(node) or "")
            if loader is not None and _consumes(where, node):
                return loader, where
    return None


def _top_level_loads(model: ModuleModel) -> dict[str, list[ast.Name]]:
    """Names read by the module's own top-level code (not inside a function or class)."""
    loads: dict[str, list[ast.Name]] = {}
    for statement in model.tree.body:
        if isinstance(statement, (*_FUNCTIONS, ast.ClassDef)):
            continue
        for node in walk_local(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                loads.setdefault(node.id, []).append(node)
    return loads


def returned_loader(
    project: Project, model: ModuleModel, call: ast.Call, depth: int
) -> tuple[LoaderCall, ModuleModel] | None:
    """The worker DataLoader a call of a project function, or of a method of an object a project
    function returns, gives back: built there, held by a local, or kept in ``self.x``."""
    if depth > _MAX_CALL_DEPTH:
        return None
    found = project.function(model, call.func)
    if found is not None:
        return _loader_returned_by(project, found[0], found[1], None, depth)
    if isinstance(call.func, ast.Attribute):  # data_loader.load_data()
        owner = _instance_class(project, model, call.func.value, depth)
        if owner is not None:
            method = _method(project, owner[0], owner[1], call.func.attr, depth)
            if method is not None:
                return _loader_returned_by(project, method[0], method[1], method[2], depth)
    return None


def _loader_returned_by(
    project: Project,
    model: ModuleModel,
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    cls: ast.ClassDef | None,
    depth: int,
) -> tuple[LoaderCall, ModuleModel] | None:
    for node in walk_local(function):
        if isinstance(node, ast.Return) and node.value is not None:
            found = _loader_value(project, model, node.value, cls, depth + 1)
            if found is not None:
                return found
    return None


def _loader_value(
    project: Project, model: ModuleModel, value: ast.AST, cls: ast.ClassDef | None, depth: int
) -> tuple[LoaderCall, ModuleModel] | None:
    if depth > _MAX_CALL_DEPTH:
        return None
    candidates: list[ast.AST] = []
    if isinstance(value, ast.Call):
        for loader in _candidates(project, model):
            if loader.node is value:
                return loader, model
        return returned_loader(project, model, value, depth + 1)
    if isinstance(value, ast.Name):
        candidates = [
            b for b in model.scopes.lookup(value.id, value)[:4] if isinstance(b, ast.expr)
        ]
    elif (
        isinstance(value, ast.Attribute) and cls is not None and dotted_name(value.value) == "self"
    ):
        candidates = [  # return self.dataloader: what any method of the class stores there
            node.value
            for node in ast.walk(cls)
            if isinstance(node, ast.Assign)
            and any(dotted_name(t) == f"self.{value.attr}" for t in node.targets)
        ]
    for candidate in candidates:
        found = _loader_value(project, model, candidate, cls, depth + 1)
        if found is not None:
            return found
    return None


def _instance_class(
    project: Project, model: ModuleModel, node: ast.AST, depth: int
) -> tuple[ModuleModel, ast.ClassDef] | None:
    """The project class of ``node``: built here, returned by a project factory function or by
    a method (``Loaders().build(4)`` returning ``self``)."""
    found = project.class_of_instance(model, node)
    if found is not None or depth > _MAX_CALL_DEPTH:
        return found
    if isinstance(node, ast.Name):
        if node.id == "self":
            cls = model.scopes.enclosing(node, (ast.ClassDef,))
            return (model, cls) if isinstance(cls, ast.ClassDef) else None
        binding = model.scopes.single_binding(node.id, node)
        return _instance_class(project, model, binding, depth + 1) if binding else None
    if not isinstance(node, ast.Call):
        return None
    function: tuple[ModuleModel, ast.FunctionDef | ast.AsyncFunctionDef] | None
    function = project.function(model, node.func)
    if function is None and isinstance(node.func, ast.Attribute):
        owner = _instance_class(project, model, node.func.value, depth + 1)
        method = _method(project, owner[0], owner[1], node.func.attr, depth) if owner else None
        function = (method[0], method[1]) if method else None
    if function is None:
        return None
    for returned in walk_local(function[1]):
        if isinstance(returned, ast.Return) and returned.value is not None:
            found = _instance_class(project, function[0], returned.value, depth + 1)
            if found is not None:
                return found
    return None


def _method(
    project: Project, model: ModuleModel, cls: ast.ClassDef, name: str, depth: int
) -> tuple[ModuleModel, ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef] | None:
    """``cls.name``, looked up through the project's base classes."""
    for statement in cls.body:
        if isinstance(statement, _FUNCTIONS) and statement.name == name:
            return model, statement, cls
    for base in cls.bases if depth <= _MAX_CALL_DEPTH else []:
        resolved = project.resolve(model, base)
        if resolved is not None and isinstance(resolved[1], ast.ClassDef):
            found = _method(project, resolved[0], resolved[1], name, depth + 1)
            if found is not None:
                return found
    return None


def _candidates(project: Project, model: ModuleModel) -> list[LoaderCall]:
    return [
        loader for loader in model.loaders if loader.may_start_workers and project.spawns(loader)
    ]


def _module_holders(model: ModuleModel, candidates: list[LoaderCall]) -> _Holders:
    """Module-level names bound to a worker DataLoader, or to a container of them."""
    holders = _Holders()
    for loader in candidates:
        node: ast.AST = loader.node
        parent = model.scopes.parents.get(node)
        while isinstance(parent, (*_CONTAINERS, ast.comprehension, ast.keyword)):
            if isinstance(parent, ast.comprehension) and parent.iter is node:
                break  # iterating a loader to build something is a use, not a holder
            node, parent = parent, model.scopes.parents.get(parent)
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            if model.scopes.scope_of(parent) is model.tree:
                for target in targets:
                    if isinstance(target, ast.Name):
                        holders.setdefault(target.id, loader)
                        if node is not loader.node:
                            holders.containers.add(target.id)
    return holders


class _Holders(dict[str, LoaderCall]):
    """Name -> DataLoader; ``containers`` are the names bound to a dict or list of them."""

    def __init__(self) -> None:
        super().__init__()
        self.containers: set[str] = set()


def _uses_loader(model: ModuleModel, use: ast.Name, holders: _Holders) -> bool:
    """A use of a holder that iterates a DataLoader: ``loaders["train"]`` for a container."""
    node: ast.AST = use
    if use.id in holders.containers:
        parent = model.scopes.parents.get(use)
        if not (isinstance(parent, ast.Subscript) and parent.value is use):
            return False  # iterating a dict of loaders does not start any of them
        node = parent
    return _consumes(model, node)


def _holder_uses(model: ModuleModel, holders: _Holders) -> dict[str, list[ast.Name]]:
    uses: dict[str, list[ast.Name]] = {}
    if not holders:
        return uses
    for node in model.scopes.nodes:
        if isinstance(node, ast.Name) and node.id in holders and isinstance(node.ctx, ast.Load):
            uses.setdefault(node.id, []).append(node)
    return uses


def _consumed_at_top_level(
    model: ModuleModel,
    loader: LoaderCall,
    holders: _Holders,
    uses: dict[str, list[ast.Name]],
) -> bool:
    if _consumes(model, loader.node):
        return True
    for name, held in holders.items():
        if held is not loader:
            continue
        for use in uses.get(name, ()):
            if model.scopes.scope_of(use) is model.tree and _uses_loader(model, use, holders):
                if model.placement(use) is Placement.UNGUARDED:
                    return True
    return False


def _import_time_calls(model: ModuleModel) -> Iterator[ast.Call]:
    """Calls of project functions made while the module is imported (outside the main guard)."""
    for statement in model.tree.body:
        if isinstance(statement, (*_FUNCTIONS, ast.ClassDef, ast.Import, ast.ImportFrom)):
            continue
        for node in walk_local(statement):
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
                if model.placement(node) is Placement.UNGUARDED:
                    yield node


def _starts_workers(
    project: Project,
    model: ModuleModel,
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    depth: int,
    cache: dict[int, tuple[LoaderCall, ModuleModel] | None],
) -> tuple[LoaderCall, ModuleModel] | None:
    """The worker DataLoader (and its module) that calling ``function`` iterates, if any:
    built in it, held by its module, or reached through the project functions it calls."""
    if id(function) in cache:
        return cache[id(function)]
    if depth > _MAX_CALL_DEPTH:
        return None
    cache[id(function)] = None  # recursion guard
    found: tuple[LoaderCall, ModuleModel] | None = None
    candidates = _candidates(project, model)
    for loader in candidates:
        if model.scopes.scope_of(loader.node) is function and _is_consumed_in(
            model, loader, function
        ):
            found = loader, model
            break
    if found is None:
        holders = _module_holders(model, candidates)
        local_names = model.scopes.bindings(function)
        for node in walk_local(function):
            if isinstance(node, ast.Name) and node.id in holders and node.id not in local_names:
                if isinstance(node.ctx, ast.Load) and _uses_loader(model, node, holders):
                    found = holders[node.id], model
                    break
    if found is None:
        found = _factory_loader_consumed(project, model, function, depth)
    if found is None:
        for edge in project.graph.callees(Caller(model, function)):
            if edge.callee.cls is None:
                found = _starts_workers(
                    project, edge.callee.module, edge.callee.function, depth + 1, cache
                )
                if found is not None:
                    break
    cache[id(function)] = found
    return found


def _factory_loader_consumed(
    project: Project,
    model: ModuleModel,
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    depth: int,
) -> tuple[LoaderCall, ModuleModel] | None:
    """``loader = build_loader(cfg)`` in the function, then iterated there: the DataLoader a
    project factory returns, with the workers its defaults give (``num_workers=8``)."""
    for node in walk_local(function):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        names = {t.id for t in node.targets if isinstance(t, ast.Name)}
        if not names:
            continue
        consumed = any(
            isinstance(use, ast.Name)
            and use.id in names
            and isinstance(use.ctx, ast.Load)
            and use.lineno >= node.lineno
            and _consumes(model, use)
            for use in walk_local(function)
        )
        if consumed:
            found = returned_loader(project, model, node.value, depth + 1)
            if found is not None:
                return found
    return None


def _is_consumed_in(model: ModuleModel, loader: LoaderCall, function: ast.AST) -> bool:
    """Whether the DataLoader is iterated or handed to other code (which will iterate it)."""
    node: ast.AST = loader.node
    parent = model.scopes.parents.get(node)
    while isinstance(parent, (*_CONTAINERS, ast.comprehension)) and not (
        isinstance(parent, ast.comprehension) and parent.iter is node
    ):
        node, parent = parent, model.scopes.parents.get(parent)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        target = parent.targets[0]
        if not isinstance(target, ast.Name):
            return False
        for use in walk_local(function):
            if isinstance(use, ast.Name) and use.id == target.id and use.lineno >= parent.lineno:
                if isinstance(use.ctx, ast.Load) and _consumes(model, use):
                    return True
        return False
    return _consumes(model, node)


def _consumes(model: ModuleModel, node: ast.AST) -> bool:
    """Whether this use of a loader (or of a container of loaders) iterates it or hands it on."""
    parent = model.scopes.parents.get(node)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        return False  # loader.dataset, len(loader.sampler): no workers
    if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)) and parent.iter is node:
        return True
    if isinstance(parent, ast.keyword):
        parent = model.scopes.parents.get(parent)
    if isinstance(parent, ast.Call) and parent.func is not node:
        return dotted_name(parent.func) not in _HARMLESS_CONSUMERS
    return False
