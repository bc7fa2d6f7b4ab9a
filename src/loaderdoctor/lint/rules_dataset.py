"""Rules about Dataset classes and collate functions: LD103 and LD106 to LD109."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from loaderdoctor.lint.model import DatasetClass, Hit, ModuleModel, Workers
from loaderdoctor.lint.scope import is_self_attribute, walk_local

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# torch.cuda calls that only ask questions and do not create a CUDA context in the worker.
_HARMLESS_CUDA = frozenset({"is_available", "device_count", "is_initialized"})
_HANDLE_OPENERS = frozenset(
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


def _worker_datasets(model: ModuleModel) -> Iterator[DatasetClass]:
    for dataset in model.datasets.values():
        if model.dataset_runs_in_workers(dataset):
            yield dataset


def _self_assignments(function: ast.AST) -> Iterator[tuple[str, ast.expr, ast.Assign]]:
    for node in walk_local(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if is_self_attribute(target):
                    assert isinstance(target, ast.Attribute)
                    yield target.attr, node.value, node


def _uses_self_attribute(functions: list[ast.FunctionDef | ast.AsyncFunctionDef], attr: str) -> str | None:
    for function in functions:
        for node in ast.walk(function):
            if is_self_attribute(node, attr) and isinstance(node.ctx, ast.Load):  # type: ignore[attr-defined]
                return function.name
    return None


def _stored_elsewhere(model: ModuleModel, attr: str, init: ast.AST) -> bool:
    """Whether ``.attr`` is (re)assigned outside ``__init__``: lazily, or by worker_init_fn."""
    inside = set(ast.walk(init))
    for node in ast.walk(model.tree):
        if isinstance(node, ast.Attribute) and node.attr == attr and node not in inside:
            if isinstance(node.ctx, ast.Store):
                return True
    return False


# -- LD103 -------------------------------------------------------------------------------------


def check_cuda_in_workers(model: ModuleModel) -> Iterator[Hit]:
    seen: set[ast.AST] = set()
    for dataset in _worker_datasets(model):
        for method in dataset.worker_methods():
            for node, what in _cuda_uses(model, method, dataset):
                if node not in seen:
                    seen.add(node)
                    yield Hit(node, "LD103", f"{what} in `{dataset.name}.{method.name}` runs in "
                              "DataLoader workers")
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
        values = [v for a, v, _ in _self_assignments(init)] if init else []
        values = [v for a, v, _ in _self_assignments(init) if a == node.attr] if init else []
        return len(values) == 1 and _is_cuda_device(model, values[0], None)
    value = model.scopes.evaluate(node)
    return isinstance(value, str) and value.split(":")[0] == "cuda"


# -- LD106 -------------------------------------------------------------------------------------


def check_shared_handles(model: ModuleModel) -> Iterator[Hit]:
    for dataset in _worker_datasets(model):
        init = dataset.method("__init__")
        if init is None:
            continue
        for attr, value, _ in _self_assignments(init):
            if not isinstance(value, ast.Call):
                continue
            opener = model.scopes.qualified(value.func)
            if opener not in _HANDLE_OPENERS or _closed_in(init, attr):
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


# -- LD107 -------------------------------------------------------------------------------------


def check_python_object_tables(model: ModuleModel) -> Iterator[Hit]:
    for dataset in _worker_datasets(model):
        init = dataset.method("__init__")
        if init is None:
            continue
        assignments: dict[str, list[ast.expr]] = {}
        for attr, value, _ in _self_assignments(init):
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
                yield Hit(values[0], "LD107", _table_message(dataset, attr, "filled in a loop over"))


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
    return isinstance(node, ast.Call) and dotted_name_is(node.func, ("list", "dict")) and not node.args


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
                if inner.func.attr in ("append", "extend") and is_self_attribute(inner.func.value, attr):
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
                    if model.scopes.qualified(call.func) in _HANDLE_OPENERS:
                        names.add(item.optional_vars.id)
    return names


# -- LD108 -------------------------------------------------------------------------------------


def check_opencv_threads(model: ModuleModel) -> Iterator[Hit]:
    if "cv2" not in model.scopes.imports.values() and not any(
        origin.startswith("cv2.") for origin in model.scopes.imports.values()
    ):
        return
    for call in model.calls:
        if model.scopes.qualified(call.func) == "cv2.setNumThreads":
            return
    for dataset in _worker_datasets(model):
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
    for dataset in _worker_datasets(model):
        init = dataset.method("__init__")
        if init is None:
            continue
        for attr, value, _ in _self_assignments(init):
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
    for node in ast.walk(model.tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            if node.value.attr == attr:
                if node.attr in _RESEEDS or isinstance(node.ctx, ast.Store):
                    return True
                if node.attr == "bit_generator":
                    return True
    return False
