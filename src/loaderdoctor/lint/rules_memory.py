"""LD107: per-sample Python objects held by a Dataset, copied page by page into every worker."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from loaderdoctor.lint.model import DatasetClass, Hit, ModuleModel
from loaderdoctor.lint.rules_dataset import HANDLE_OPENERS, self_assignments, worker_datasets
from loaderdoctor.lint.scope import is_self_attribute, walk_local

_LISTINGS = frozenset(
    {
        "os.listdir",
        "os.scandir",
        "os.walk",
        "glob.glob",
        "glob.iglob",
        "json.load",
        "json.loads",
        "csv.reader",
        "csv.DictReader",
    }
)
_LISTING_METHODS = frozenset({"glob", "rglob", "iterdir", "readlines", "iterrows", "itertuples"})


def check_python_object_tables(model: ModuleModel) -> Iterator[Hit]:
    for dataset in worker_datasets(model):
        init = dataset.method("__init__")
        if init is None:
            continue
        assignments: dict[str, list[ast.expr]] = {}
        for attr, value, _ in self_assignments(init):
            assignments.setdefault(attr, []).append(value)
        indexed = _indexed_attributes(dataset)
        for attr, values in assignments.items():
            if attr not in indexed:
                continue
            built = [value for value in values if not _is_empty_container(value)]
            if len(built) > 1:
                continue  # rebuilt later, typically as a numpy array
            if built and _built_from_listing(model, built[0], init):
                yield Hit(built[0], "LD107", _table_message(dataset, attr, "built from"))
            elif not built and len(values) == 1 and _filled_from_listing(model, init, attr):
                yield Hit(
                    values[0], "LD107", _table_message(dataset, attr, "filled in a loop over")
                )


def _table_message(dataset: DatasetClass, attr: str, how: str) -> str:
    return (
        f"`{dataset.name}.{attr}` is a Python list/dict of per-sample objects {how} a file "
        "listing or rows, indexed in `__getitem__`: copy-on-read grows every worker's memory"
    )


def _indexed_attributes(dataset: DatasetClass) -> set[str]:
    getitem = dataset.method("__getitem__")
    found: set[str] = set()
    if getitem is not None:
        for node in ast.walk(getitem):
            if isinstance(node, ast.Subscript) and is_self_attribute(node.value):
                assert isinstance(node.value, ast.Attribute)
                found.add(node.value.attr)
    return found


def _is_empty_container(node: ast.expr) -> bool:
    if isinstance(node, (ast.List, ast.Dict)):
        return not (node.elts if isinstance(node, ast.List) else node.keys)
    return (
        isinstance(node, ast.Call) and dotted_name_is(node.func, ("list", "dict")) and not node.args
    )


def dotted_name_is(node: ast.AST, names: tuple[str, ...]) -> bool:
    return isinstance(node, ast.Name) and node.id in names


def _built_from_listing(model: ModuleModel, value: ast.expr, init: ast.AST) -> bool:
    if isinstance(value, (ast.ListComp, ast.DictComp)):
        return any(_is_listing(model, generator.iter, init) for generator in value.generators)
    if isinstance(value, ast.Call) and dotted_name_is(value.func, ("list", "dict")) and value.args:
        argument = value.args[0]
        if isinstance(argument, ast.GeneratorExp):
            return any(_is_listing(model, g.iter, init) for g in argument.generators)
        return isinstance(argument, ast.Call) and model.scopes.qualified(argument.func) in (
            "csv.reader",
            "csv.DictReader",
        )
    return False


def _filled_from_listing(model: ModuleModel, init: ast.AST, attr: str) -> bool:
    for node in walk_local(init):
        if not isinstance(node, (ast.For, ast.AsyncFor)) or not _is_listing(model, node.iter, init):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute):
                if inner.func.attr in ("append", "extend") and is_self_attribute(
                    inner.func.value, attr
                ):
                    return True
            if isinstance(inner, ast.Subscript) and isinstance(inner.ctx, ast.Store):
                if is_self_attribute(inner.value, attr):
                    return True
    return False


def _is_listing(model: ModuleModel, node: ast.AST, init: ast.AST) -> bool:
    file_names = _open_file_names(model, init)
    for child in ast.walk(node):
        if isinstance(child, ast.Call):
            if model.scopes.qualified(child.func) in _LISTINGS:
                return True
            if isinstance(child.func, ast.Attribute) and child.func.attr in _LISTING_METHODS:
                return True
            if model.scopes.qualified(child.func) == "open":
                return True
        elif isinstance(child, ast.Name) and child.id in file_names:
            return True
    return False


def _open_file_names(model: ModuleModel, function: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in walk_local(function):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and isinstance(item.optional_vars, ast.Name):
                    if model.scopes.qualified(call.func) in HANDLE_OPENERS:
                        names.add(item.optional_vars.id)
    return names
