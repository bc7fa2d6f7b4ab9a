"""Rules about Dataset classes and collate functions: LD103 and LD106 to LD109."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from loaderdoctor.lint.model import DatasetClass, FunctionNode, Hit, ModuleModel
from loaderdoctor.lint.project import Project
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
        "bz2.open",
        "lzma.open",
        "shelve.open",
        "dbm.open",
        "cv2.VideoCapture",
        "pyarrow.parquet.ParquetFile",
        "fsspec.open",
        "smart_open.open",
    }
)
# Network and database clients: a socket (and its TLS state) shared by forked workers.
_CLIENTS = frozenset(
    {
        "boto3.client",
        "boto3.resource",
        "requests.Session",
        "requests.session",
        "httpx.Client",
        "urllib3.PoolManager",
        "redis.Redis",
        "redis.StrictRedis",
        "pymongo.MongoClient",
        "psycopg2.connect",
        "pymysql.connect",
        "google.cloud.storage.Client",
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


def self_assignments(function: ast.AST) -> Iterator[tuple[str, ast.expr, ast.Assign]]:
    for node in walk_local(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if is_self_attribute(target):
                    assert isinstance(target, ast.Attribute)
                    yield target.attr, node.value, node


def init_assignments(
    dataset: DatasetClass,
) -> Iterator[tuple[str, ast.expr, FunctionNode, DatasetClass]]:
    """``self.x = value`` in ``__init__`` and the helpers it calls, with where each is."""
    for function, owner in dataset.init_methods():
        for attr, value, _ in self_assignments(function):
            yield attr, value, function, owner


def uses_self_attribute(methods: list[tuple[FunctionNode, DatasetClass]], attr: str) -> str | None:
    """The name of the first worker method that reads ``self.attr``."""
    for function, _ in methods:
        for node in ast.walk(function):
            if is_self_attribute(node, attr) and isinstance(node.ctx, ast.Load):  # type: ignore[attr-defined]
                return function.name
    return None


def stored_elsewhere(dataset: DatasetClass, attr: str) -> bool:
    """Whether ``.attr`` is (re)assigned outside ``__init__``: lazily, or by worker_init_fn."""
    init_nodes: set[ast.AST] = set()
    for function, _ in dataset.init_methods():
        init_nodes.update(ast.walk(function))
    for module in {id(m): m for m in (dataset.module, *dataset.module.project.modules)}.values():
        for node in module.scopes.attributes.get(attr, ()):
            if isinstance(node.ctx, ast.Store) and node not in init_nodes:
                return True
    return False


# -- LD103 -------------------------------------------------------------------------------------


def check_cuda_in_workers(project: Project) -> Iterator[Hit]:
    for dataset in project.worker_datasets():
        for method, owner in dataset.worker_methods():
            for node, what in _cuda_uses(owner.module, method, owner):
                yield Hit(
                    owner.module,
                    node,
                    "LD103",
                    f"{what} in `{owner.name}.{method.name}` runs in every DataLoader worker: "
                    "a forked worker cannot initialise CUDA, a spawned one builds its own context",
                )
    for model in project.modules:
        for loader in model.loaders:
            collate = loader.arguments.get("collate_fn")
            if collate is None or not loader.may_start_workers:
                continue
            function = _collate_function(model, collate)
            if function is None:
                continue
            for node, what in _cuda_uses(model, function, None):
                yield Hit(
                    model,
                    node,
                    "LD103",
                    f"{what} in the collate_fn runs in every DataLoader worker: a forked worker "
                    "cannot initialise CUDA, a spawned one builds its own context",
                )


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
        values = [(v, o) for a, v, _, o in init_assignments(dataset) if a == node.attr]
        return len(values) == 1 and _is_cuda_device(values[0][1].module, values[0][0], None)
    value = model.scopes.evaluate(node)
    return isinstance(value, str) and value.split(":")[0] == "cuda"


# -- LD106 -------------------------------------------------------------------------------------


def check_shared_handles(project: Project) -> Iterator[Hit]:
    for dataset in project.worker_datasets():
        workers = dataset.worker_methods()
        for attr, value, function, owner in init_assignments(dataset):
            opener = _handle_opener(owner.module, value, owner, 0)
            if opener is None or _closed_in(dataset, attr):
                continue
            if stored_elsewhere(dataset, attr):
                continue
            user = uses_self_attribute(workers, attr)
            if user is None:
                continue
            where = "" if function.name == "__init__" else f" (via `{function.name}()`)"
            yield Hit(
                owner.module,
                value,
                "LD106",
                f"`self.{attr}` holds {opener}, opened in `{dataset.name}.__init__`{where} and "
                f"used in `{user}`: forked workers share one handle (one offset, one "
                "connection), and spawn cannot pickle it",
            )


def _handle_opener(
    model: ModuleModel, value: ast.expr, owner: DatasetClass, depth: int
) -> str | None:
    """What kind of handle ``value`` opens, in words, or None."""
    if depth > 3 or not isinstance(value, ast.Call):
        return None
    name = model.scopes.qualified(value.func) or ""
    if name in HANDLE_OPENERS:
        return f"a `{name}(...)` handle"
    if name in _CLIENTS or (
        name.split(".")[-1] in ("client", "resource") and name.startswith("boto3")
    ):
        return f"a `{name}(...)` client"
    if name in ("numpy.load", "np.load"):
        return _npz_handle(model, value)
    receiver = value.func.value if isinstance(value.func, ast.Attribute) else None
    if (
        isinstance(value.func, ast.Attribute)
        and isinstance(receiver, ast.Name)
        and receiver.id == "self"
    ):
        helper = owner.find(value.func.attr)  # self.env = self._open_env(path)
        if helper is not None:
            function, helper_owner = helper
            for node in walk_local(function):
                if isinstance(node, ast.Return) and node.value is not None:
                    found = _handle_opener(helper_owner.module, node.value, helper_owner, depth + 1)
                    if found:
                        return found
                    if isinstance(node.value, ast.Name):
                        for binding in helper_owner.module.scopes.lookup(node.value.id, node):
                            if isinstance(binding, ast.expr):
                                found = _handle_opener(
                                    helper_owner.module, binding, helper_owner, depth + 1
                                )
                                if found:
                                    return found
    return None


def _npz_handle(model: ModuleModel, call: ast.Call) -> str | None:
    """``np.load`` keeps a file open for an .npz archive or a file object (no mmap_mode)."""
    for keyword in call.keywords:
        if keyword.arg == "mmap_mode" and not (
            isinstance(keyword.value, ast.Constant) and keyword.value.value is None
        ):
            return None
    if not call.args:
        return None
    source = call.args[0]
    text = model.scopes.evaluate(source)
    if isinstance(text, str) and text.endswith(".npz"):
        return "an open .npz archive (`numpy.load`)"
    if isinstance(source, ast.Call) and model.scopes.qualified(source.func) in HANDLE_OPENERS:
        return "a file object read by `numpy.load`"
    return None


def _closed_in(dataset: DatasetClass, attr: str) -> bool:
    for function, _ in dataset.init_methods():
        for node in walk_local(function):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "close" and is_self_attribute(node.func.value, attr):
                    return True
    return False


# -- LD108 -------------------------------------------------------------------------------------


def check_opencv_threads(project: Project) -> Iterator[Hit]:
    if project.sets_cv2_threads:
        return  # process-wide, wherever it is called: a setup module, the entry point
    for dataset in project.worker_datasets():
        for method, owner in dataset.worker_methods():
            model = owner.module
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
                    model,
                    use,
                    "LD108",
                    f"OpenCV is used in `{owner.name}.{method.name}` but no module of the "
                    "project calls `cv2.setNumThreads(0)`: every worker starts a thread per "
                    "core, num_workers x cores threads in all",
                )
                break


# -- LD109 -------------------------------------------------------------------------------------


def check_copied_generators(project: Project) -> Iterator[Hit]:
    for dataset in project.worker_datasets():
        workers = dataset.worker_methods()
        for attr, value, _, owner in init_assignments(dataset):
            factory = _rng_factory(owner.module, value)
            if factory is None or _reseeded(dataset, attr):
                continue
            user = uses_self_attribute(workers, attr)
            if user is not None:
                yield Hit(
                    owner.module,
                    value,
                    "LD109",
                    f"`self.{attr} = {factory}(...)` is created in `{dataset.name}.__init__` and "
                    f"drawn from in `{user}`: every worker gets a copy of the same generator "
                    "state, so the random augmentations repeat num_workers times",
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


def _reseeded(dataset: DatasetClass, attr: str) -> bool:
    if stored_elsewhere(dataset, attr):
        return True
    for module in dataset.module.project.modules:
        for holder in module.scopes.attributes.get(attr, ()):
            node = module.scopes.parents.get(holder)
            if isinstance(node, ast.Attribute) and node.value is holder:
                if node.attr in _RESEEDS or node.attr == "bit_generator":
                    return True
                if isinstance(node.ctx, ast.Store):
                    return True
    return False
