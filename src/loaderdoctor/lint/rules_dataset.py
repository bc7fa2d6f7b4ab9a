"""Rules about Dataset classes and collate functions: LD103 and LD106 to LD109."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from loaderdoctor.lint.model import DatasetClass, Hit, ModuleModel, Workers
from loaderdoctor.lint.scope import is_self_attribute, walk_local

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# torch.cuda calls that only ask questions and do not create a CUDA context in the worker.
_HARMLESS_CUDA = frozenset({"is_available", "device_count", "is_initialized"})
HANDLE_OPENERS = frozenset(
    {
        "open",
        "io.open",
        "builtins.open",
        "gzip.open",
        "h5py.File",
        "lmdb.open",
        "lmdb.Environment",
        "sqlite3.connect",
        "socket.socket",
        "socket.create_connection",
        "tables.open_file",
        "zipfile.ZipFile",
        "tarfile.open",
    }
)
_RNG_FACTORIES = frozenset(
    {
        "numpy.random.default_rng",
        "numpy.random.RandomState",
        "numpy.random.Generator",
        "random.Random",
        "torch.Generator",
    }
)
_RESEEDS = frozenset({"seed", "manual_seed", "set_state", "setstate", "__setstate__"})


def worker_datasets(model: ModuleModel) -> Iterator[DatasetClass]:
    for dataset in model.datasets.values():
        if model.dataset_runs_in_workers(dataset):
            yield dataset


def self_assignments(function: ast.AST) -> Iterator[tuple[str, ast.expr, ast.Assign]]:
    for node in walk_local(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if is_self_attribute(target):
                    assert isinstance(target, ast.Attribute)
                    yield target.attr, node.value, node


def _uses_self_attribute(
    functions: list[ast.FunctionDef | ast.AsyncFunctionDef], attr: str
) -> str | None:
    for function in functions:
        for node in ast.walk(function):
            if is_self_attribute(node, attr) and isinstance(node.ctx, ast.Load):  # type: ignore[attr-defined]
                return function.name
    return None


def _stored_elsewhere(model: ModuleModel, attr: str, init: ast.AST) -> bool:
    """Whether ``.attr`` is (re)assigned outside ``__init__``: lazily, or by worker_init_fn."""
    stores = [n for n in model.scopes.attributes.get(attr, ()) if isinstance(n.ctx, ast.Store)]
    if not stores:
        return False
    inside = set(ast.walk(init))
    return any(node not in inside for node in stores)


# -- LD103 -------------------------------------------------------------------------------------


def check_cuda_in_workers(model: ModuleModel) -> Iterator[Hit]:
    seen: set[ast.AST] = set()
    for dataset in worker_datasets(model):
        for method in dataset.worker_methods():
            for node, what in _cuda_uses(model, method, dataset):
                if node not in seen:
                    seen.add(node)
                    yield Hit(
                        node,
                        "LD103",
                        f"{what} in `{dataset.name}.{method.name}` runs in DataLoader workers",
                    )
    for loader in model.loaders:
        collate = loader.arguments.get("collate_fn")
        if collate is None or loader.workers is Workers.ZERO:
            continue
        function = _collate_function(model, collate)
        if function is None:
            continue
        for node, what in _cuda_uses(model, function, None):
            if node not in seen:
                seen.add(node)
                yield Hit(node, "LD103", f"{what} in the collate_fn runs in DataLoader workers")


def _collate_function(model: ModuleModel, node: ast.expr) -> ast.AST | None:
    if isinstance(node, ast.Lambda):
        return node
    if isinstance(node, ast.Name):
        binding = model.scopes.single_binding(node.id, node)
        if isinstance(binding, (*_FUNCTIONS, ast.Lambda)):
            return binding
    cls = model.class_of_instance(node)
    if cls is not None:
        for statement in cls.body:
            if isinstance(statement, _FUNCTIONS) and statement.name == "__call__":
                return statement
    return None


def _cuda_uses(
    model: ModuleModel, function: ast.AST, dataset: DatasetClass | None
) -> Iterator[tuple[ast.AST, str]]:
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "cuda":
            yield node, "`.cuda()`"
            continue
        name = model.scopes.qualified(func) or ""
        if name.startswith("torch.cuda.") and name.split(".")[2] not in _HARMLESS_CUDA:
            yield node, f"`{name}()`"
            continue
        if isinstance(func, ast.Attribute) and func.attr == "to" and node.args:
            if _is_cuda_device(model, node.args[0], dataset):
                yield node, "`.to(<cuda device>)`"
                continue
        for keyword in node.keywords:
            if keyword.arg == "device" and _is_cuda_device(model, keyword.value, dataset):
                yield node, "`device=<cuda device>`"
                break


def _is_cuda_device(model: ModuleModel, node: ast.AST, dataset: DatasetClass | None) -> bool:
    if isinstance(node, ast.Call) and model.scopes.qualified(node.func) == "torch.device":
        return bool(node.args) and _is_cuda_device(model, node.args[0], dataset)
    if dataset is not None and isinstance(node, ast.Attribute) and is_self_attribute(node):
        init = dataset.method("__init__")
        values = [v for a, v, _ in self_assignments(init) if a == node.attr] if init else []
        return len(values) == 1 and _is_cuda_device(model, values[0], None)
    value = model.scopes.evaluate(node)
    return isinstance(value, str) and value.split(":")[0] == "cuda"


# -- LD106 -------------------------------------------------------------------------------------


def check_shared_handles(model: ModuleModel) -> Iterator[Hit]:
    for dataset in worker_datasets(model):
        init = dataset.method("__init__")
        if init is None:
            continue
        for attr, value, _ in self_assignments(init):
            if not isinstance(value, ast.Call):
                continue
            opener = model.scopes.qualified(value.func)
            if opener not in HANDLE_OPENERS or _closed_in(init, attr):
                continue
            if _stored_elsewhere(model, attr, init):
                continue
            user = _uses_self_attribute(dataset.worker_methods(), attr)
            if user is not None:
                yield Hit(
                    value,
                    "LD106",
                    f"`self.{attr} = {opener}(...)` is opened in `{dataset.name}.__init__` and "
                    f"used in `{user}`: every worker shares one handle",
                )


def _closed_in(function: ast.AST, attr: str) -> bool:
    for node in walk_local(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "close" and is_self_attribute(node.func.value, attr):
                return True
    return False


# -- LD108 -------------------------------------------------------------------------------------


def check_opencv_threads(model: ModuleModel) -> Iterator[Hit]:
    if "cv2" not in model.scopes.imports.values() and not any(
        origin.startswith("cv2.") for origin in model.scopes.imports.values()
    ):
        return
    for call in model.calls:
        if model.scopes.qualified(call.func) == "cv2.setNumThreads":
            return
    for dataset in worker_datasets(model):
        for method in dataset.worker_methods():
            use = next(
                (
                    node
                    for node in ast.walk(method)
                    if isinstance(node, ast.Call)
                    and (model.scopes.qualified(node.func) or "").startswith("cv2.")
                ),
                None,
            )
            if use is not None:
                yield Hit(
                    use,
                    "LD108",
                    f"OpenCV is used in `{dataset.name}.{method.name}` but its threads are never "
                    "limited (`cv2.setNumThreads(0)`): every worker starts a thread per core",
                )
                break


# -- LD109 -------------------------------------------------------------------------------------


def check_copied_generators(model: ModuleModel) -> Iterator[Hit]:
    for dataset in worker_datasets(model):
        init = dataset.method("__init__")
        if init is None:
            continue
        for attr, value, _ in self_assignments(init):
            factory = _rng_factory(model, value)
            if factory is None or _reseeded(model, attr, init):
                continue
            user = _uses_self_attribute(dataset.worker_methods(), attr)
            if user is not None:
                yield Hit(
                    value,
                    "LD109",
                    f"`self.{attr} = {factory}(...)` is created in `{dataset.name}.__init__` and "
                    f"drawn from in `{user}`: every worker repeats the same random stream",
                )


def _rng_factory(model: ModuleModel, value: ast.expr) -> str | None:
    if not isinstance(value, ast.Call):
        return None
    if isinstance(value.func, ast.Attribute) and value.func.attr == "manual_seed":
        inner = value.func.value
        if isinstance(inner, ast.Call) and model.scopes.qualified(inner.func) == "torch.Generator":
            return "torch.Generator"
        return None
    name = model.scopes.qualified(value.func)
    return name if name in _RNG_FACTORIES else None


def _reseeded(model: ModuleModel, attr: str, init: ast.AST) -> bool:
    if _stored_elsewhere(model, attr, init):
        return True
    for holder in model.scopes.attributes.get(attr, ()):
        node = model.scopes.parents.get(holder)
        if isinstance(node, ast.Attribute) and node.value is holder:
            if node.attr in _RESEEDS or node.attr == "bit_generator":
                return True
            if isinstance(node.ctx, ast.Store):
                return True
    return False
