"""LD101: DataLoader workers started when the module is imported, outside the main guard."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from loaderdoctor.lint.model import Hit, LoaderCall, ModuleModel, Placement, StartMethod, Workers
from loaderdoctor.lint.scope import dotted_name, walk_local

# Calls that look at a DataLoader without starting its workers.
_HARMLESS_CONSUMERS = frozenset({"len", "print", "isinstance", "type", "id", "repr", "str"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MAX_CALL_DEPTH = 4


def check_main_guard(model: ModuleModel) -> Iterator[Hit]:
    # A notebook's __main__ cannot be re-imported by a spawned worker, so the guard does not help.
    if model.notebook:
        return
    for loader in model.loaders:
        if not _starts_workers_under_spawn(loader):
            continue
        if model.placement(loader.node) is Placement.UNGUARDED and _is_consumed(
            model, loader, True
        ):
            yield Hit(
                loader.node,
                "LD101",
                f"DataLoader with num_workers={loader.workers_text} is created and iterated at "
                'module top level without an `if __name__ == "__main__":` guard',
            )
    functions = {
        statement.name: statement
        for statement in model.tree.body
        if isinstance(statement, _FUNCTIONS)
    }
    for statement in model.tree.body:
        for node in _unguarded_calls(model, statement):
            name = node.func.id if isinstance(node.func, ast.Name) else ""
            line = _starts_loader_workers(model, functions, name, depth=0, seen=set())
            if line is not None:
                yield Hit(
                    node,
                    "LD101",
                    f"`{name}()` runs at import time and starts DataLoader workers (line {line}) "
                    'without an `if __name__ == "__main__":` guard',
                )


def _starts_workers_under_spawn(loader: LoaderCall) -> bool:
    return loader.workers is Workers.POSITIVE and loader.start_method is StartMethod.SPAWN


def _unguarded_calls(model: ModuleModel, statement: ast.stmt) -> Iterator[ast.Call]:
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        if model.placement(statement) is Placement.UNGUARDED:
            yield statement.value
    elif isinstance(statement, (ast.If, ast.Try, ast.With)):
        for child in ast.iter_child_nodes(statement):
            if isinstance(child, ast.stmt):
                yield from _unguarded_calls(model, child)


def _starts_loader_workers(
    model: ModuleModel,
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
    name: str,
    depth: int,
    seen: set[str],
) -> int | None:
    """The line of a worker DataLoader that calling module function ``name`` iterates."""
    function = functions.get(name)
    if function is None or name in seen or depth > _MAX_CALL_DEPTH:
        return None
    seen.add(name)
    for loader in model.loaders:
        if model.scopes.scope_of(loader.node) is function and _starts_workers_under_spawn(loader):
            if _is_consumed(model, loader, False):
                return loader.node.lineno
    for node in walk_local(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            line = _starts_loader_workers(model, functions, node.func.id, depth + 1, seen)
            if line is not None:
                return line
    return None


def _is_consumed(model: ModuleModel, loader: LoaderCall, top_level: bool) -> bool:
    """Whether the DataLoader is iterated or handed to other code (which will iterate it)."""
    parent = model.scopes.parents.get(loader.node)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        target = parent.targets[0]
        if not isinstance(target, ast.Name):
            return False
        scope = model.scopes.scope_of(loader.node)
        for node in walk_local(scope) if not top_level else model.scopes.nodes:
            if isinstance(node, ast.Name) and node.id == target.id and node.lineno > parent.lineno:
                if isinstance(node.ctx, ast.Load) and _consumes(model, node):
                    if not top_level or model.placement(node) is Placement.UNGUARDED:
                        return True
        return False
    return _consumes(model, loader.node)


def _consumes(model: ModuleModel, node: ast.AST) -> bool:
    parent = model.scopes.parents.get(node)
    if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is node:
        return True
    if isinstance(parent, ast.keyword):
        parent = model.scopes.parents.get(parent)
    if isinstance(parent, ast.Call) and parent.func is not node:
        return dotted_name(parent.func) not in _HARMLESS_CONSUMERS
    return False
