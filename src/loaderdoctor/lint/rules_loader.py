"""Rules about DataLoader calls: LD102 pickling, LD104 loops, LD105 options."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from loaderdoctor.lint.model import (
    Hit,
    LoaderCall,
    ModuleModel,
    StartMethod,
    Workers,
)
from loaderdoctor.lint.scope import UNKNOWN, dotted_name, is_self_attribute, walk_local

_PICKLED_CALLABLES = ("collate_fn", "worker_init_fn", "sampler", "batch_sampler")
_WORKER_ONLY_OPTIONS = ("prefetch_factor", "persistent_workers", "timeout")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


# -- LD102 -------------------------------------------------------------------------------------


def check_unpicklable(model: ModuleModel) -> Iterator[Hit]:
    for loader in model.loaders:
        if loader.workers is not Workers.POSITIVE or loader.start_method is not StartMethod.SPAWN:
            continue
        for parameter in _PICKLED_CALLABLES:
            value = loader.arguments.get(parameter)
            reason = _unpicklable_reason(model, value, depth=0) if value is not None else None
            if value is not None and reason is not None:
                yield Hit(
                    value,
                    "LD102",
                    f"{parameter} is {reason}: it cannot be pickled into spawn/forkserver workers",
                )
        yield from _dataset_hits(model, loader)


def _unpicklable_reason(model: ModuleModel, node: ast.AST, depth: int) -> str | None:
    if depth > 4:
        return None
    if isinstance(node, ast.Lambda):
        return "a lambda"
    if isinstance(node, ast.Name):
        binding = model.scopes.single_binding(node.id, node)
        if isinstance(binding, ast.Lambda):
            return f"`{node.id}`, a lambda"
        if isinstance(binding, _FUNCTIONS):
            outer = model.scopes.enclosing(binding, _FUNCTIONS)
            if isinstance(outer, _FUNCTIONS):
                return f"`{node.id}`, a function defined inside `{outer.name}()`"
            return None
        if isinstance(binding, ast.Call):
            return _unpicklable_reason(model, binding, depth + 1)
        return None
    if isinstance(node, ast.Call):
        if model.scopes.qualified(node.func) in ("functools.partial", "partial") and node.args:
            inner = _unpicklable_reason(model, node.args[0], depth + 1)
            return f"a functools.partial of {inner}" if inner else None
        cls = model.class_of_instance(node)
        return _class_reason(model, cls, "an instance of") if cls else None
    if isinstance(node, ast.Attribute):
        owner = (
            model.scopes.enclosing(node, (ast.ClassDef,))
            if is_self_attribute(node)
            else model.class_of_instance(node.value)
        )
        if isinstance(owner, ast.ClassDef):
            cls = owner
            reason = _class_reason(model, cls, "a method of")
            return f"`{dotted_name(node)}`, {reason}" if reason else None
    return None


def _class_reason(model: ModuleModel, cls: ast.ClassDef, article: str) -> str | None:
    outer = model.scopes.enclosing(cls, _FUNCTIONS)
    if isinstance(outer, _FUNCTIONS):
        return f"{article} `{cls.name}`, a class defined inside `{outer.name}()`"
    attribute = lambda_attribute(cls)
    if attribute is not None:
        return f"{article} `{cls.name}`, which holds a lambda in `self.{attribute}`"
    return None


def lambda_attribute(cls: ast.ClassDef) -> str | None:
    """The ``self.x`` that ``__init__`` sets to a lambda, if any."""
    for statement in cls.body:
        if isinstance(statement, _FUNCTIONS) and statement.name == "__init__":
            for node in walk_local(statement):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
                    for target in node.targets:
                        if is_self_attribute(target):
                            assert isinstance(target, ast.Attribute)
                            return target.attr
    return None


def _dataset_hits(model: ModuleModel, loader: LoaderCall) -> Iterator[Hit]:
    dataset = loader.arguments.get("dataset")
    construction: ast.AST | None = dataset
    if isinstance(dataset, ast.Name):
        construction = model.scopes.single_binding(dataset.id, dataset)
    if dataset is None or not isinstance(construction, ast.Call):
        return
    cls = model.class_of_instance(construction)
    reason = _class_reason(model, cls, "an instance of") if cls else None
    if reason is not None:
        yield Hit(
            dataset,
            "LD102",
            f"the Dataset is {reason}: it cannot be pickled into spawn/forkserver workers",
        )
        return
    constructor = model.scopes.qualified(construction.func) or ""
    if cls is None and not _looks_like_dataset_constructor(constructor):
        return
    for argument in (*construction.args, *(k.value for k in construction.keywords)):
        for held in _held_lambdas(model, argument):
            yield Hit(
                held,
                "LD102",
                f"a lambda passed to `{constructor.split('.')[-1]}(...)` is held by the Dataset, "
                "which is pickled into spawn/forkserver workers",
            )


def _looks_like_dataset_constructor(name: str) -> bool:
    last = name.split(".")[-1]
    return name.startswith(("torchvision.datasets.", "torch.utils.data.")) or last.endswith(
        ("Dataset", "Folder")
    )


def _held_lambdas(model: ModuleModel, node: ast.AST) -> Iterator[ast.Lambda]:
    if isinstance(node, ast.Lambda):
        yield node
    elif isinstance(node, (ast.List, ast.Tuple)):
        for element in node.elts:
            yield from _held_lambdas(model, element)
    elif isinstance(node, ast.Call):
        last = (model.scopes.qualified(node.func) or "").split(".")[-1]
        if last in ("Lambda", "Compose", "Sequential", "RandomApply", "RandomChoice"):
            for argument in (*node.args, *(k.value for k in node.keywords)):
                yield from _held_lambdas(model, argument)


# -- LD104 -------------------------------------------------------------------------------------


def check_loader_in_loop(model: ModuleModel) -> Iterator[Hit]:
    for loader in model.loaders:
        if loader.workers is not Workers.POSITIVE:
            continue
        loop = _enclosing_loop_body(model, loader.node)
        if loop is None:
            continue
        if _takes_one_batch(model, loader, loop) or _iterates_a_loader(model, loop):
            yield Hit(
                loader.node,
                "LD104",
                f"DataLoader with num_workers={loader.workers_text} is created inside a training "
                f"loop (line {loop.lineno}): its workers are re-spawned every step",
            )


def _enclosing_loop_body(
    model: ModuleModel, node: ast.AST
) -> ast.For | ast.AsyncFor | ast.While | None:
    child: ast.AST = node
    parent = model.scopes.parents.get(child)
    while parent is not None and not isinstance(parent, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)):
        if isinstance(parent, _LOOPS) and any(child is statement for statement in parent.body):
            return parent
        child, parent = parent, model.scopes.parents.get(parent)
    return None


def _takes_one_batch(
    model: ModuleModel, loader: LoaderCall, loop: ast.For | ast.AsyncFor | ast.While
) -> bool:
    parent = model.scopes.parents.get(loader.node)
    if isinstance(parent, ast.Call) and dotted_name(parent.func) == "iter":
        return True
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        target = parent.targets[0]
        if isinstance(target, ast.Name):
            for node in walk_local(loop):
                if isinstance(node, ast.Call) and dotted_name(node.func) == "iter" and node.args:
                    argument = node.args[0]
                    if isinstance(argument, ast.Name) and argument.id == target.id:
                        return True
    return False


def _iterates_a_loader(model: ModuleModel, loop: ast.For | ast.AsyncFor | ast.While) -> bool:
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return False
    loader_nodes = {loader.node for loader in model.loaders}
    for node in ast.walk(loop.iter):
        if node in loader_nodes:
            return True
        if isinstance(node, ast.Name):
            bindings = model.scopes.lookup(node.id, node)
            if bindings and all(binding in loader_nodes for binding in bindings):
                return True
    return False


# -- LD105 -------------------------------------------------------------------------------------


def check_worker_options(model: ModuleModel) -> Iterator[Hit]:
    for loader in model.loaders:
        if loader.workers is not Workers.ZERO:
            continue
        for option in _WORKER_ONLY_OPTIONS:
            node = loader.arguments.get(option)
            if node is None:
                continue
            value = model.scopes.evaluate(node)
            if value is UNKNOWN or not _is_active(option, value):
                continue
            text = model.segment(node) or repr(value)
            effect = "is ignored" if option == "timeout" else "makes torch raise ValueError"
            yield Hit(
                loader.keywords.get(option, node),
                "LD105",
                f"`{option}={text}` {effect} with num_workers={loader.workers_text}",
                fix=f"Remove `{option}={text}`, or set num_workers to a positive number.",
            )


def _is_active(option: str, value: object) -> bool:
    if option == "prefetch_factor":
        return value is not None
    if option == "persistent_workers":
        return bool(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
