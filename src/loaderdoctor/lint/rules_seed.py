"""LD110: a worker reseeded from numpy's state after torch has seeded it.

``np.random.seed(np.random.get_state()[1][0] + worker_id)`` in a ``worker_init_fn`` was a common
answer to pytorch/pytorch#5059 (every worker drew the same numpy numbers). Since torch 1.9 each
worker's numpy generator is seeded from an array (``_generate_state`` in
``torch/utils/data/_utils/worker.py``), and MT19937 seeded from an array always starts its state
with ``0x80000000`` (``init_by_array``): the expression is ``2147483648 + worker_id`` in every
epoch of every run, so the random augmentations repeat exactly.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from loaderdoctor.lint.model import Hit, LoaderCall, ModuleModel
from loaderdoctor.lint.project import Project

# Functions that seed a generator from one integer (imgaug's global seed included).
SEEDERS = frozenset(
    {
        "numpy.random.seed",
        "random.seed",
        "torch.manual_seed",
        "imgaug.seed",
        "imgaug.random.seed",
    }
)
_STATE_READERS = frozenset({"numpy.random.get_state"})


def check_reseed_from_state(project: Project) -> Iterator[Hit]:
    for model in project.modules:
        for call in model.calls:
            if state_reseed(model, call) is None:
                continue
            yield Hit(
                model,
                call,
                "LD110",
                f"`{model.segment(call.func)}(...)` seeds from `np.random.get_state()[1][0]`, "
                "which is 2147483648 in every worker once torch has seeded numpy from an array: "
                "the seed is the same every epoch and every run, so the random augmentations "
                "repeat",
            )
    for model, call, argument in fixed_reseeds(project):
        yield Hit(
            model,
            call,
            "LD110",
            f"`{model.segment(call.func)}({model.segment(argument)})` in a worker_init_fn seeds "
            "each worker from a number that is the same in every epoch (and every run): each "
            "epoch repeats the last one's random augmentations",
        )
    for model, call, argument in worker_id_reseeds(project):
        yield Hit(
            model,
            call,
            "LD110",
            f"`{model.segment(call.func)}({model.segment(argument)})` seeds each worker from its "
            "worker id alone, and the workers are not persistent: every epoch starts them again "
            "from the same seeds, so each epoch repeats the last one's random augmentations",
        )


def worker_id_reseeds(project: Project) -> Iterator[tuple[ModuleModel, ast.Call, ast.expr]]:
    """Seeding calls in a Dataset's worker methods from the worker's id alone
    (``torch.manual_seed(get_worker_info().id)`` on a worker's first item, RAFT's shape): a
    worker that is not persistent starts again each epoch from the same seed. Skipped when a
    DataLoader given the Dataset keeps its workers (``persistent_workers=True``)."""
    for dataset in project.worker_datasets():
        if _keeps_workers(project.loaders_of(dataset)):
            continue
        for function, owner in dataset.worker_methods():
            model = owner.module
            infos = _worker_info_names(model, function)
            if not infos:
                continue
            calls = [node for node in ast.walk(function) if isinstance(node, ast.Call)]
            calls.sort(key=lambda node: (node.lineno, node.col_offset))
            for node in calls:  # the first: random, numpy and torch are usually seeded together
                name = model.scopes.qualified(node.func) or ""
                if name in SEEDERS and len(node.args) == 1 and _from_worker_id(node.args[0], infos):
                    yield model, node, node.args[0]
                    break


def _keeps_workers(loaders: list[LoaderCall]) -> bool:
    for loader in loaders:
        kept = loader.arguments.get("persistent_workers")
        if not (isinstance(kept, ast.Constant) and kept.value is False) and kept is not None:
            return True
    return False


def _worker_info_names(model: ModuleModel, function: ast.AST) -> set[str]:
    """Locals bound to ``torch.utils.data.get_worker_info()`` in ``function``."""
    names: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            called = model.scopes.qualified(node.value.func) or ""
            if called.endswith("get_worker_info"):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _from_worker_id(value: ast.AST, infos: set[str]) -> bool:
    """``info.id``, ``info.id + 1``, ``seed + info.id``: the id, with constants only."""
    uses_id = False
    for node in ast.walk(value):
        if isinstance(node, ast.Attribute):
            if node.attr == "id" and isinstance(node.value, ast.Name) and node.value.id in infos:
                uses_id = True
            else:
                return False
        elif isinstance(node, ast.Call):
            return False
        elif isinstance(node, ast.Name) and node.id not in infos:
            return False
    return uses_id


def fixed_reseeds(project: Project) -> Iterator[tuple[ModuleModel, ast.Call, ast.expr]]:
    """Seeding calls in a worker_init_fn whose seed is fixed for the run: built only from the
    function's parameters (``worker_id``, a bound ``rank``/``seed``), constants and
    module-level names (``42 + worker_id``, ``args.seed + worker_id``)."""
    seen: set[int] = set()
    for model in project.modules:
        for loader in model.loaders:
            found = _init_function(project, model, loader.arguments.get("worker_init_fn"))
            if found is None or id(found[1]) in seen:
                continue
            seen.add(id(found[1]))
            owner, function = found
            body = function.body if isinstance(function, ast.Lambda) else function
            calls = [node for node in ast.walk(body) if isinstance(node, ast.Call)]
            calls.sort(key=lambda node: (node.lineno, node.col_offset))
            for node in calls:  # the first: random, numpy and torch are usually seeded together
                if _fixed_seed(owner, function, node):
                    yield owner, node, node.args[0]
                    break


def _init_function(
    project: Project, model: ModuleModel, node: ast.expr | None
) -> tuple[ModuleModel, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda] | None:
    """The function a worker_init_fn argument names: a def, a lambda, a partial of a def."""
    if isinstance(node, ast.Lambda):
        return model, node
    if isinstance(node, ast.Call) and node.args:
        if (model.scopes.qualified(node.func) or "") in ("functools.partial", "partial"):
            return _init_function(project, model, node.args[0])
        return None
    if isinstance(node, ast.Name):
        binding = model.scopes.single_binding(node.id, node)
        if isinstance(binding, ast.Lambda):
            return model, binding
    if isinstance(node, (ast.Name, ast.Attribute)):
        return project.function(model, node)
    return None


_FIXED_CALLS = frozenset({"int", "abs", "hash", "str", "float"})


def _fixed_seed(
    model: ModuleModel,
    function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
    call: ast.Call,
) -> bool:
    if (model.scopes.qualified(call.func) or "") not in SEEDERS or len(call.args) != 1:
        return False
    if state_reseed(model, call) is not None:
        return False  # said by the other message
    return _fixed_value(model, function, call.args[0], 0)


def _fixed_value(
    model: ModuleModel,
    function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
    value: ast.AST,
    depth: int,
) -> bool:
    """Whether ``value`` is the same every epoch: no call but int()/abs()/hash(), and names
    that are parameters, module-level names or locals bound once to such a value."""
    parameters = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    module_names = model.scopes.bindings(model.tree)
    for node in ast.walk(value):
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in _FIXED_CALLS):
                return False  # torch.initial_seed(), time.time(), get_worker_info().seed
        elif isinstance(node, ast.Name) and node.id not in _FIXED_CALLS:
            if node.id in parameters or node.id in module_names:
                continue
            binding = model.scopes.single_binding(node.id, node)  # worker_seed = rank + seed
            if depth > 3 or not isinstance(binding, ast.expr):
                return False
            if not _fixed_value(model, function, binding, depth + 1):
                return False
    return True


def state_reseed(model: ModuleModel, call: ast.Call) -> ast.expr | None:
    """The seed argument of a seeding call that reads numpy's state word, or None."""
    if (model.scopes.qualified(call.func) or "") not in SEEDERS or len(call.args) != 1:
        return None
    argument = call.args[0]
    for node in ast.walk(argument):
        if _state_word(model, node):
            return argument
    return None


def _state_word(model: ModuleModel, node: ast.AST) -> bool:
    """``np.random.get_state()[1][0]`` (or ``[1][k]``): a word of numpy's MT19937 key."""
    if not isinstance(node, ast.Subscript) or not isinstance(node.value, ast.Subscript):
        return False
    inner = node.value.value
    return (
        isinstance(inner, ast.Call)
        and (model.scopes.qualified(inner.func) or "") in _STATE_READERS
        and isinstance(node.value.slice, ast.Constant)
        and node.value.slice.value == 1
    )
