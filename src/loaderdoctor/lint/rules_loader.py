"""Rules about DataLoader calls: LD102 pickling, LD104 loops, LD105 options."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from loaderdoctor.lint.model import Hit, LoaderCall, ModuleModel, Workers
from loaderdoctor.lint.project import Project, spawn_severity, spawn_where
from loaderdoctor.lint.scope import UNKNOWN, dotted_name, is_self_attribute, walk_local

_PICKLED_CALLABLES = ("collate_fn", "worker_init_fn", "sampler", "batch_sampler")
_WORKER_ONLY_OPTIONS = ("prefetch_factor", "persistent_workers", "timeout")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


# -- LD102 -------------------------------------------------------------------------------------


def check_unpicklable(project: Project) -> Iterator[Hit]:
    for model in project.modules:
        for loader in model.loaders:
            if not loader.may_start_workers or not project.spawns(loader):
                continue
            for parameter in _PICKLED_CALLABLES:
                value = loader.arguments.get(parameter)
                reason = None
                if value is not None:
                    reason = _unpicklable_reason(project, model, value, depth=0)
                if value is not None and reason is not None:
                    yield _hit(project, model, loader, value, f"{parameter} is {reason}")
            yield from _dataset_hits(project, model, loader)


def _hit(project: Project, model: ModuleModel, loader: LoaderCall, node: ast.AST, what: str) -> Hit:
    maybe = f" (num_workers={loader.workers_text})" if loader.workers is Workers.MAYBE else ""
    fix = None
    if _NOTEBOOK in what:  # a module-level definition can only live in a module
        kind = "class" if ("an instance of" in what or "a method of" in what) else "function"
        fix = (
            f"Move the {kind} into a .py module and import it (spawned workers import it "
            "from there, as they cannot import the notebook)."
        )
    return Hit(
        model,
        node,
        "LD102",
        f"{what}: pickle cannot send it to spawn/forkserver workers, so the first epoch fails "
        f"{spawn_where(project, loader)}{maybe}",
        fix=fix,
        severity=spawn_severity(project, loader),
    )


def _unpicklable_reason(
    project: Project, model: ModuleModel, node: ast.AST, depth: int
) -> str | None:
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
            if model.notebook:
                return f"`{node.id}`, {_NOTEBOOK}"
            return None
        if isinstance(binding, ast.Call):
            return _unpicklable_reason(project, model, binding, depth + 1)
        return None
    if isinstance(node, ast.Call):
        if model.scopes.qualified(node.func) in ("functools.partial", "partial") and node.args:
            inner = _unpicklable_reason(project, model, node.args[0], depth + 1)
            return f"a functools.partial of {inner}" if inner else None
        found = project.class_of_instance(model, node)
        return _class_reason(found[0], found[1], "an instance of") if found else None
    if isinstance(node, ast.Attribute):
        owner = (
            model.scopes.enclosing(node, (ast.ClassDef,))
            if is_self_attribute(node)
            else _local_class_of_instance(project, model, node.value)
        )
        if isinstance(owner, ast.ClassDef):
            reason = _class_reason(model, owner, "a method of")
            return f"`{dotted_name(node)}`, {reason}" if reason else None
    return None


_NOTEBOOK = "defined in a notebook cell (spawned workers cannot import the notebook's __main__)"


def _class_reason(model: ModuleModel, cls: ast.ClassDef, article: str) -> str | None:
    outer = model.scopes.enclosing(cls, _FUNCTIONS)
    if isinstance(outer, _FUNCTIONS):
        return f"{article} `{cls.name}`, a class defined inside `{outer.name}()`"
    if model.notebook:
        return f"{article} `{cls.name}`, {_NOTEBOOK}"
    attribute = lambda_attribute(model, cls)
    if attribute is not None:
        return f"{article} `{cls.name}`, which holds a lambda in `self.{attribute}`"
    held = unpicklable_attribute(model, cls)
    if held is not None:
        return f"{article} `{cls.name}`, which holds {held[1]} in `self.{held[0]}`"
    return None


# Objects that run fine in forked workers but cannot be pickled into spawned ones. Measured
# (torch 2.13, Python 3.11, 2026-12-03): a Dataset holding `multiprocessing.Manager()` fails
# under spawn with "cannot pickle 'weakref.ReferenceType' object"; one holding only a proxy
# the manager made (`manager.dict()`) pickles and works, as both do under fork.
_UNPICKLABLE_OBJECTS = {
    "multiprocessing.Manager": "a `multiprocessing.Manager()` (its server process handle)",
    "torch.multiprocessing.Manager": "a `multiprocessing.Manager()` (its server process handle)",
    "multiprocessing.managers.SyncManager": "a `SyncManager` (its server process handle)",
}


def unpicklable_attribute(model: ModuleModel, cls: ast.ClassDef) -> tuple[str, str] | None:
    """(attribute, what) for a ``self.x`` that ``__init__`` sets to an object of
    ``_UNPICKLABLE_OBJECTS``, built there or held by a local first."""
    for statement in cls.body:
        if not (isinstance(statement, _FUNCTIONS) and statement.name == "__init__"):
            continue
        for node in walk_local(statement):
            if not isinstance(node, ast.Assign):
                continue
            value: ast.AST | None = node.value
            if isinstance(value, ast.Name):
                value = model.scopes.single_binding(value.id, value)
            if not isinstance(value, ast.Call):
                continue
            what = _UNPICKLABLE_OBJECTS.get(model.scopes.qualified(value.func) or "")
            if what is None:
                continue
            for target in node.targets:
                if is_self_attribute(target):
                    assert isinstance(target, ast.Attribute)
                    return target.attr, what
    return None


def lambda_attribute(model: ModuleModel, cls: ast.ClassDef) -> str | None:
    """The ``self.x`` that ``__init__`` sets to a lambda (alone or inside a Compose), if any."""
    for statement in cls.body:
        if isinstance(statement, _FUNCTIONS) and statement.name == "__init__":
            for node in walk_local(statement):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if is_self_attribute(target) and next(
                            _held_callables(model, node.value, 0), None
                        ):
                            assert isinstance(target, ast.Attribute)
                            return target.attr
    return None


def _local_class_of_instance(
    project: Project, model: ModuleModel, node: ast.AST
) -> ast.ClassDef | None:
    """The class of this module whose instance ``node`` evaluates to, if a reader can tell."""
    found = project.class_of_instance(model, node)
    return found[1] if found and found[0] is model else None


def _dataset_hits(project: Project, model: ModuleModel, loader: LoaderCall) -> Iterator[Hit]:
    dataset = loader.arguments.get("dataset")
    if dataset is None:
        return
    for construction in dataset_constructions(model, dataset):
        yield from _construction_hits(project, model, loader, dataset, construction)


def dataset_constructions(model: ModuleModel, dataset: ast.AST, depth: int = 0) -> list[ast.Call]:
    """The calls that may have built the Dataset a DataLoader is given: the call itself, each
    binding of a name that reaches the DataLoader (one per ``if`` branch), or the entry of a
    dict or list the DataLoader is given an item of (``DataLoader(dataset=splits["train"])``)."""
    if depth > 4:
        return []
    if isinstance(dataset, ast.Call):
        return [dataset]
    if isinstance(dataset, ast.Name):
        found: list[ast.Call] = []
        for binding in model.scopes.reaching(dataset.id, dataset)[:8]:
            if isinstance(binding, ast.expr):
                found.extend(dataset_constructions(model, binding, depth + 1))
            elif isinstance(binding, (ast.For, ast.comprehension)) and isinstance(
                binding.iter, (ast.List, ast.Tuple)
            ):  # for dataset in (Train(...), Val(...)): each element in turn
                for element in binding.iter.elts:
                    found.extend(dataset_constructions(model, element, depth + 1))
        return found
    if isinstance(dataset, ast.Subscript):
        container: ast.AST = dataset.value
        if isinstance(container, ast.Name):
            bindings = model.scopes.reaching(container.id, container)
            container = bindings[0] if len(bindings) == 1 else container
        entries: list[ast.expr] = []
        if isinstance(container, ast.Dict):
            key = dataset.slice
            entries = [
                value
                for k, value in zip(container.keys, container.values)
                if not (isinstance(key, ast.Constant) and isinstance(k, ast.Constant))
                or k.value == key.value
            ]
        elif isinstance(container, (ast.List, ast.Tuple)):
            entries = list(container.elts)
        return [c for entry in entries for c in dataset_constructions(model, entry, depth + 1)]
    return []


def _construction_hits(
    project: Project,
    model: ModuleModel,
    loader: LoaderCall,
    dataset: ast.AST,
    construction: ast.Call,
) -> Iterator[Hit]:
    found = project.class_of_instance(model, construction)
    if found is not None:
        reason = _class_reason(found[0], found[1], "an instance of")
        if reason is not None:
            yield _hit(project, model, loader, dataset, f"the Dataset is {reason}")
            return
    constructor = model.scopes.qualified(construction.func) or ""
    if found is None and not _looks_like_dataset_constructor(constructor):
        return
    kept = _kept_parameters(found[0], found[1]) if found else None
    parameters = _parameter_names(found[1]) if found else []
    for position, argument in enumerate(construction.args):
        name = parameters[position] if position < len(parameters) else None
        if kept is None or name is None or name in kept:
            yield from _held_hits(project, model, loader, constructor, argument)
    for keyword in construction.keywords:
        if kept is None or keyword.arg is None or keyword.arg in kept:
            yield from _held_hits(project, model, loader, constructor, keyword.value)


def _held_hits(
    project: Project, model: ModuleModel, loader: LoaderCall, constructor: str, argument: ast.AST
) -> Iterator[Hit]:
    short = constructor.split(".")[-1]
    for node, what in _held_callables(model, argument, 0, project):
        yield _hit(
            project,
            model,
            loader,
            node,
            f"{what} passed to `{short}(...)` is kept by the Dataset, which is pickled into "
            "every worker",
        )


def _parameter_names(cls: ast.ClassDef) -> list[str]:
    for statement in cls.body:
        if isinstance(statement, _FUNCTIONS) and statement.name == "__init__":
            names = [arg.arg for arg in (*statement.args.posonlyargs, *statement.args.args)]
            return names[1:]  # without self
    return []


def _kept_parameters(model: ModuleModel, cls: ast.ClassDef) -> set[str] | None:
    """Parameters of ``__init__`` that the instance keeps (None: cannot tell, assume all).

    A parameter only called in ``__init__`` (a transform applied once while indexing) is not
    pickled with the Dataset; one stored on ``self`` or handed to ``super().__init__`` is.
    """
    init = next((s for s in cls.body if isinstance(s, _FUNCTIONS) and s.name == "__init__"), None)
    if init is None:
        return None
    kept: set[str] = set()
    for node in ast.walk(init):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            parent = model.scopes.parents.get(node)
            if isinstance(parent, ast.Call) and parent.func is node:
                continue
            kept.add(node.id)
    return kept


def _looks_like_dataset_constructor(name: str) -> bool:
    last = name.split(".")[-1]
    return name.startswith(("torchvision.datasets.", "torch.utils.data.")) or last.endswith(
        ("Dataset", "Folder")
    )


# Callables that keep the callables they are given, and are pickled with them: a
# defaultdict keeps its default_factory (``defaultdict(lambda: 4)`` cannot be pickled).
_WRAPPERS = frozenset(
    {
        "Lambda",
        "Compose",
        "Sequential",
        "RandomApply",
        "RandomChoice",
        "RandomOrder",
        "partial",
        "defaultdict",
    }
)


def _held_callables(
    model: ModuleModel, node: ast.AST, depth: int, project: Project | None = None
) -> Iterator[tuple[ast.AST, str]]:
    """Lambdas and local functions inside an argument, followed through local variables and,
    given the project, into what a project function returns (``get_transform(size)``).

    ``depth`` counts nodes, not variables: ``tf = Compose([ToTensor(), gray])`` with
    ``gray = Lambda(lambda x: ...)`` is five nodes from the argument down to the lambda.
    """
    if depth > 12:
        return
    if isinstance(node, ast.Lambda):
        yield node, "a lambda"
    elif isinstance(node, (ast.List, ast.Tuple)):
        for element in node.elts:
            yield from _held_callables(model, element, depth + 1, project)
    elif isinstance(node, ast.Name):
        values = (
            project.values_of(model, node)
            if project is not None
            else [(model, b) for b in model.scopes.lookup(node.id, node)]
        )
        for owner, binding in values:
            if owner is not model:  # imported, by name or by a star-import
                inner = next(_held_callables(owner, binding, depth + 1, project), None)
                if inner is not None:
                    line = getattr(inner[0], "lineno", 0)
                    yield node, f"`{node.id}`, {inner[1]} ({owner.path}:{line}),"
                    return
            elif isinstance(binding, _FUNCTIONS):
                outer = model.scopes.enclosing(binding, _FUNCTIONS)
                if isinstance(outer, _FUNCTIONS):
                    yield node, f"`{node.id}`, a function defined inside `{outer.name}()`,"
            elif isinstance(binding, ast.expr):
                yield from _held_callables(model, binding, depth + 1, project)
    elif isinstance(node, ast.Call):
        last = (model.scopes.qualified(node.func) or "").split(".")[-1]
        if last in _WRAPPERS:
            for argument in (*node.args, *(k.value for k in node.keywords)):
                yield from _held_callables(model, argument, depth + 1, project)
        elif project is not None and depth < 8:
            yield from _returned_callables(project, model, node, depth)


def _returned_callables(
    project: Project, model: ModuleModel, call: ast.Call, depth: int
) -> Iterator[tuple[ast.AST, str]]:
    """A lambda inside what a project function returns, reported at the call that gets it."""
    found = project.function(model, call.func)
    if found is None:
        return
    for node in walk_local(found[1]):
        if isinstance(node, ast.Return) and node.value is not None:
            inner = next(_held_callables(found[0], node.value, depth + 4, project), None)
            if inner is not None:
                where = f"line {node.lineno}" + (
                    f" of {found[0].path}" if found[0] is not model else ""
                )
                yield call, f"{inner[1]} in what `{dotted_name(call.func)}()` returns ({where})"
                return


# -- LD104 -------------------------------------------------------------------------------------


def check_loader_in_loop(project: Project) -> Iterator[Hit]:
    for model in project.modules:
        for loader in model.loaders:
            if not loader.may_start_workers:
                continue
            loop = _enclosing_loop_body(model, loader.node)
            if loop is None or _depends_on_loop(model, loader, loop):
                continue  # a different Dataset each turn (`_dataset, _ = ...`): not a rebuild
            if _takes_one_batch(model, loader, loop) or _iterates_a_loader(model, loop):
                how = "for every batch"
            elif _rebuilt_unchanged_each_time(model, loader, loop):
                how = "every time round the loop"
            else:
                continue
            yield Hit(
                model,
                loader.node,
                "LD104",
                f"DataLoader with num_workers={loader.workers_text} is created inside the loop "
                f"at line {loop.lineno} from the same arguments each time: all its workers are "
                f"started again (and the Dataset pickled into each) {how}",
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


def _depends_on_loop(
    model: ModuleModel, loader: LoaderCall, loop: ast.For | ast.AsyncFor | ast.While
) -> bool:
    """Whether an argument of the DataLoader is a name the loop binds again each turn."""
    parent = model.scopes.parents.get(loader.node)
    own = {
        target.id
        for target in (parent.targets if isinstance(parent, ast.Assign) else [])
        if isinstance(target, ast.Name)
    }
    used = {n.id for n in ast.walk(loader.node) if isinstance(n, ast.Name)}
    return bool(used & (_names_bound_in(loop) - own))


def _rebuilt_unchanged_each_time(
    model: ModuleModel, loader: LoaderCall, loop: ast.For | ast.AsyncFor | ast.While
) -> bool:
    """An epoch loop that builds the same DataLoader again and iterates it once per turn.

    Loops over folds, splits or shards (the arguments depend on the loop), loops where the
    Dataset is changed first (``dataset.resample()``), and loaders iterated in an inner epoch
    loop are all fine.
    """
    parent = model.scopes.parents.get(loader.node)
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1):
        return False
    target = parent.targets[0]
    if not isinstance(target, ast.Name):
        return False
    bound = _names_bound_in(loop) - {target.id}
    used = {n.id for n in ast.walk(loader.node) if isinstance(n, ast.Name)}
    if used & bound:
        return False
    given = {
        name
        for argument in (*loader.node.args, *(k.value for k in loader.node.keywords))
        if (name := dotted_name(argument)) is not None
    }
    if _changed_in_loop(loop, given):
        return False
    for node in walk_local(loop):
        if isinstance(node, ast.Name) and node.id == target.id and isinstance(node.ctx, ast.Load):
            consumer = model.scopes.parents.get(node)
            if isinstance(consumer, (ast.For, ast.AsyncFor)) and consumer.iter is node:
                if _enclosing_loop_body(model, consumer) is loop:
                    return True
            elif isinstance(consumer, ast.Call) and consumer.func is not node:
                if _enclosing_loop_body(model, consumer) is loop and dotted_name(
                    consumer.func
                ) not in ("len", "print"):
                    return True
    return False


def _names_bound_in(loop: ast.For | ast.AsyncFor | ast.While) -> set[str]:
    names: set[str] = set()
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        names |= {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    for node in walk_local(loop):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
    return names


def _changed_in_loop(loop: ast.AST, given: set[str]) -> bool:
    """Whether the loop calls a method on, or assigns into, an object the DataLoader is given."""

    def touches(node: ast.AST) -> bool:
        name = dotted_name(node)
        return name is not None and any(
            name == other or name.startswith(f"{other}.") for other in given
        )

    for node in walk_local(loop):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if touches(node.func.value):  # dataset.set_epoch(epoch), self.dataset.resample()
                return True
        if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
            if touches(node.value) or touches(node):
                return True
    return False


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


def check_worker_options(project: Project) -> Iterator[Hit]:
    for model in project.modules:
        yield from _worker_options(model)


def _worker_options(model: ModuleModel) -> Iterator[Hit]:
    for loader in model.loaders:
        if loader.workers is not Workers.ZERO and not loader.zero_by_default:
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
            fix = f"Remove `{option}={text}`, or set num_workers to a positive number."
            if loader.zero_by_default:  # keep the option for runs that do ask for workers
                workers = model.segment(loader.arguments["num_workers"])
                fix = (
                    f"Give it only with workers: `{option}={text} if {workers} > 0 else "
                    f"{_OFF[option]}`, or make the flag's default positive."
                )
            yield Hit(
                model,
                loader.keywords.get(option, node),
                "LD105",
                f"`{option}={text}` {effect} with num_workers={loader.workers_text}",
                fix=fix,
            )


_OFF = {"prefetch_factor": "None", "persistent_workers": "False", "timeout": "0"}


def _is_active(option: str, value: object) -> bool:
    if option == "prefetch_factor":
        return value is not None
    if option == "persistent_workers":
        return bool(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
