"""Rules about Dataset classes and collate functions: LD103 and LD106 to LD109."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from loaderdoctor.lint.calls import Caller, Path
from loaderdoctor.lint.held import (
    HeldObject,
    drawn_in,
    held_objects,
    own_assignments,
    self_assignments,
)
from loaderdoctor.lint.model import DatasetClass, FunctionNode, Hit, ModuleModel
from loaderdoctor.lint.project import Project
from loaderdoctor.lint.scope import UNKNOWN, dotted_name, is_self_attribute, walk_local

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


def stored_elsewhere(
    project: Project,
    dataset: DatasetClass,
    attr: str,
    reopens: bool = True,
    lazy_guards: bool = True,
) -> bool:
    """Whether ``.attr`` is (re)assigned outside ``__init__``: lazily, or by worker_init_fn.

    With ``reopens=False`` a store right after ``self.attr.close()`` does not count: reopening
    a handle at the end of a file leaves every worker starting from the one ``__init__`` opened.
    With ``lazy_guards=False`` neither does ``self.attr = None`` (a ``close()`` method) nor a
    store under ``if self.attr is None:``: ``__init__`` left the handle open, so a forked worker
    finds it set and never opens its own (the zip reader whose ``close()`` cleared it: 118 of
    4,000 reads failed with 4 forked workers sharing it).
    """
    init_nodes: set[ast.AST] = set()
    for function, _ in dataset.init_methods():
        init_nodes.update(ast.walk(function))
    family = _class_family(project, dataset)
    for module in {id(m): m for m in (dataset.module, *project.modules)}.values():
        for node in module.scopes.attributes.get(attr, ()):
            if isinstance(node.ctx, ast.Store) and node not in init_nodes:
                if not reopens and _reopened(module, node):
                    continue
                if not lazy_guards and (
                    _stores_none(module, node) or _under_none_guard(module, node, attr)
                ):
                    continue
                if is_self_attribute(node):
                    owner = module.scopes.enclosing(node, (ast.ClassDef,))
                    if owner is not None and id(owner) not in family:
                        continue  # another class's own attribute of the same name
                return True
    return False


def _stores_none(module: ModuleModel, target: ast.Attribute) -> bool:
    statement = module.scopes.parents.get(target)
    value = getattr(statement, "value", None)
    return isinstance(value, ast.Constant) and value.value is None


def _under_none_guard(module: ModuleModel, target: ast.Attribute, attr: str) -> bool:
    """Inside ``if self.attr is None:`` or ``if not self.attr:`` (the lazy-open idiom)."""
    child: ast.AST = target
    parent = module.scopes.parents.get(target)
    while parent is not None and not isinstance(parent, (*_FUNCTIONS, ast.Module)):
        if isinstance(parent, ast.If) and any(child is item for item in parent.body):
            for test in ast.walk(parent.test):
                if isinstance(test, ast.Compare) and is_self_attribute(test.left, attr):
                    if any(isinstance(op, ast.Is) for op in test.ops):
                        return True
                if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                    if is_self_attribute(test.operand, attr):
                        return True
        child, parent = parent, module.scopes.parents.get(parent)
    return False


def _reopened(module: ModuleModel, target: ast.Attribute) -> bool:
    """``self.f.close()`` then ``self.f = open(...)`` in the same block."""
    statement = module.scopes.parents.get(target)
    block = getattr(module.scopes.parents.get(statement), "body", None) if statement else None
    if not isinstance(block, list) or statement not in block:
        return False
    for earlier in block[: block.index(statement)]:
        call = earlier.value if isinstance(earlier, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
            if call.func.attr == "close" and dotted_name(call.func.value) == f"self.{target.attr}":
                return True
    return False


def _class_family(project: Project, dataset: DatasetClass) -> set[int]:
    """The class nodes of this Dataset, its bases and the project classes derived from it."""
    family: set[int] = set()
    pending = [dataset]
    while pending:
        current = pending.pop()
        if id(current.node) not in family and len(family) < 64:
            family.add(id(current.node))
            pending.extend(current.bases)
    for other in project.datasets:
        if any(id(base.node) in family for base in other.bases):
            family.add(id(other.node))
    return family


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
        yield from _cuda_through_calls(project, dataset)
    for model in project.modules:
        for loader in model.loaders:
            collate = loader.arguments.get("collate_fn")
            if collate is None or not loader.may_start_workers:
                continue
            function = _collate_function(project, model, collate)
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


def _cuda_through_calls(project: Project, dataset: DatasetClass) -> Iterator[Hit]:
    """CUDA in a project function that a worker method calls (``to_device(x)`` in utils)."""
    methods = {id(method) for method, _ in dataset.worker_methods()}
    for method, owner in dataset.worker_methods():
        start = Caller(owner.module, method, owner.node, dataset)
        for reached, path in project.graph.reach(start):
            if not path.edges or id(reached.function) in methods:
                continue  # worker methods are judged on their own
            use = next(iter(_cuda_uses(reached.module, reached.function, None)), None)
            if use is None:
                continue
            node, what = use
            line = getattr(node, "lineno", 0)
            yield Hit(
                owner.module,
                path.edges[0].call,
                "LD103",
                f"{what} ({reached.module.path}:{line}) is reached from "
                f"`{owner.name}.{method.name}` through {path.describe()} and runs in every "
                "DataLoader worker: a forked worker cannot initialise CUDA, a spawned one builds "
                "its own context",
            )
            return  # one per Dataset: the first path a reader can follow


def _collate_function(project: Project, model: ModuleModel, node: ast.expr) -> ast.AST | None:
    if isinstance(node, ast.Lambda):
        return node
    if isinstance(node, ast.Name):
        binding = model.scopes.single_binding(node.id, node)
        if isinstance(binding, (*_FUNCTIONS, ast.Lambda)):
            return binding
    found = project.class_of_instance(model, node)
    cls = found[1] if found and found[0] is model else None
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
        yield from _held_handles(project, dataset)
        workers = dataset.worker_methods()
        assignments = list(init_assignments(dataset))
        for attr, value, function, owner in assignments:
            opener = _handle_opener(project, owner.module, value, owner, 0)
            if opener is None or _closed_in(dataset, attr):
                continue
            if stored_elsewhere(project, dataset, attr, reopens=False, lazy_guards=False):
                continue
            # self.file = h5py.File(p); self.images = self.file["images"]: one handle, two names
            family = [attr] + [
                derived
                for derived, derived_value, _, _ in assignments
                if derived != attr and _root_attribute(derived_value) == attr
            ]
            read = _read_on_every_item(
                workers, family, _constant_flags(project, dataset, assignments)
            )
            if read is None:
                continue
            name, user = read
            where = "" if function.name == "__init__" else f" (via `{function.name}()`)"
            held = (
                f"`self.{attr}` holds {opener},"
                if name == attr
                else f"`self.{name}` is read from `self.{attr}`, {opener},"
            )
            yield Hit(
                owner.module,
                value,
                "LD106",
                f"{held} opened in `{dataset.name}.__init__`{where} and used in `{user}`: "
                "forked workers share one handle (one offset, one connection), and spawn "
                "cannot pickle it",
            )


def _held_handles(project: Project, dataset: DatasetClass) -> Iterator[Hit]:
    """A handle opened in ``__init__`` of an object the Dataset keeps (``self.reader =
    H5Reader(path)``, ``H5Reader.__init__``: ``self.file = h5py.File(path)``)."""
    for held in held_objects(project, dataset):
        for attr, value in own_assignments(project, held):
            opener = _handle_opener(project, held.module, value, None, 0)
            if opener is None or not drawn_in(held, attr) or _touched_outside_init(held, attr):
                continue
            yield Hit(
                held.module,
                value,
                "LD106",
                f"`self.{attr}` holds {opener}, opened in `{held.cls.name}.__init__`; "
                f"`{dataset.name}` keeps that object in `self.{held.path}` and uses it in "
                f"`{held.user}`: forked workers share one handle (one offset, one connection), "
                "and spawn cannot pickle it",
            )


def _touched_outside_init(held: HeldObject, attr: str) -> bool:
    """``self.attr`` closed or set again outside ``__init__``: opened lazily, or managed."""
    for statement in held.cls.body:
        if isinstance(statement, _FUNCTIONS) and statement.name != "__init__":
            for node in walk_local(statement):
                if is_self_attribute(node, attr) and isinstance(
                    getattr(node, "ctx", None), ast.Store
                ):
                    return True
                parent = node
                if isinstance(parent, ast.Attribute) and is_self_attribute(parent.value, attr):
                    if parent.attr == "close":
                        return True
    return False


def _root_attribute(value: ast.AST) -> str | None:
    """``x`` for ``self.x["images"]``, ``self.x.get(...)``, ``self.x.begin()``."""
    node = value
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Call)):
        if is_self_attribute(node):
            assert isinstance(node, ast.Attribute)
            return node.attr
        node = node.func if isinstance(node, ast.Call) else node.value
    return None


def _constant_flags(
    project: Project,
    dataset: DatasetClass,
    assignments: list[tuple[str, ast.expr, FunctionNode, DatasetClass]],
) -> dict[str, object]:
    """``self.use_cache = False`` in ``__init__``, never set again: a branch on it is dead."""
    values: dict[str, list[ast.expr]] = {}
    for attr, value, _, _ in assignments:
        values.setdefault(attr, []).append(value)
    return {
        attr: found[0].value
        for attr, found in values.items()
        if len(found) == 1
        and isinstance(found[0], ast.Constant)
        and not stored_elsewhere(project, dataset, attr)
    }


def _read_on_every_item(
    workers: list[tuple[FunctionNode, DatasetClass]],
    family: list[str],
    flags: dict[str, object],
) -> tuple[str, str] | None:
    """(attribute, worker method) of a read of the handle: one on every item if any, else one
    in a branch that may run; None when every read sits in a branch that never runs."""
    conditional: tuple[str, str] | None = None
    for function, owner in workers:
        for node in ast.walk(function):
            if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)):
                continue
            if not (is_self_attribute(node) and node.attr in family):
                continue
            branch = _branch_kind(owner.module, function, node, flags)
            if branch == "always":
                return node.attr, function.name
            if branch == "maybe" and conditional is None:
                conditional = (node.attr, function.name)
    return conditional


def _branch_kind(
    model: ModuleModel, function: ast.AST, node: ast.AST, flags: dict[str, object]
) -> str:
    """always: on every call; maybe: under a condition; never: under ``if False:`` or under
    ``if self.flag:`` where ``__init__`` set the flag to False for good."""
    kind = "always"
    child, parent = node, model.scopes.parents.get(node)
    while parent is not None and parent is not function:
        if isinstance(parent, (ast.If, ast.While, ast.IfExp)) and child is not parent.test:
            test = _flag_value(parent.test, flags)
            if test is UNKNOWN:
                test = model.scopes.evaluate(parent.test)
            in_body = any(child is item for item in _as_list(parent.body))
            if isinstance(test, (bool, int)) and not isinstance(test, type(UNKNOWN)):
                if bool(test) != in_body:
                    return "never"
            else:
                kind = "maybe"
        elif isinstance(parent, (ast.ExceptHandler, ast.For, ast.AsyncFor)):
            kind = "maybe"
        child, parent = parent, model.scopes.parents.get(parent)
    return kind


def _flag_value(test: ast.expr, flags: dict[str, object]) -> object:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _flag_value(test.operand, flags)
        return UNKNOWN if inner is UNKNOWN else not inner
    if is_self_attribute(test):
        assert isinstance(test, ast.Attribute)
        return flags.get(test.attr, UNKNOWN)
    return UNKNOWN


def _as_list(body: object) -> list[ast.AST]:
    return body if isinstance(body, list) else [body]  # type: ignore[list-item]


def _handle_opener(
    project: Project, model: ModuleModel, value: ast.expr, owner: DatasetClass | None, depth: int
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
        helper = owner.find(value.func.attr) if owner else None  # self.env = self._open_env()
        if helper is not None:
            return _returned_handle(project, helper[1].module, helper[0], helper[1], depth)
        return None
    found = project.function(model, value.func)  # self.db = open_db(path), in utils
    if found is not None:
        return _returned_handle(project, found[0], found[1], owner, depth)
    return None


def _returned_handle(
    project: Project,
    model: ModuleModel,
    function: FunctionNode,
    owner: DatasetClass | None,
    depth: int,
) -> str | None:
    """The handle a helper returns, directly or through a local it opened."""
    for node in walk_local(function):
        if isinstance(node, ast.Return) and node.value is not None:
            found = _handle_opener(project, model, node.value, owner, depth + 1)
            if found:
                return found
            if isinstance(node.value, ast.Name):
                for binding in model.scopes.lookup(node.value.id, node):
                    if isinstance(binding, ast.expr):
                        found = _handle_opener(project, model, binding, owner, depth + 1)
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
        found = _first_opencv_use(project, dataset)
        if found is None:
            continue
        method, owner, use, path, library = found
        where = f"`{owner.name}.{method.name}`"
        if library and path.edges:
            end = path.end
            assert end is not None
            yield Hit(
                owner.module,
                path.edges[0].call,
                "LD108",
                f"OpenCV (`{end.module.segment(use.func)}`, which holds `{library}`, "
                f"{end.module.path}:{getattr(use, 'lineno', 0)}) is reached from {where} through "
                f"{path.describe()}, but no module of the project calls `cv2.setNumThreads(0)`: "
                "every worker starts a thread per core, num_workers x cores threads in all",
            )
        elif library:
            yield Hit(
                owner.module,
                use,
                "LD108",
                f"{where} calls `{owner.module.segment(use.func)}` (`{library}`, which runs "
                "OpenCV), but no module of the project calls `cv2.setNumThreads(0)`: every "
                "worker starts a thread per core, num_workers x cores threads in all",
            )
        elif path.edges:
            end = path.end
            assert end is not None
            name = owner.module.scopes.qualified(use.func) if end.module is owner.module else None
            name = name or end.module.scopes.qualified(use.func) or "cv2"
            line = getattr(use, "lineno", 0)
            yield Hit(
                owner.module,
                path.edges[0].call,
                "LD108",
                f"OpenCV (`{name}`, {end.module.path}:{line}) is reached from {where} through "
                f"{path.describe()}, but no module of the project calls `cv2.setNumThreads(0)`: "
                "every worker starts a thread per core, num_workers x cores threads in all",
            )
        else:
            yield Hit(
                owner.module,
                use,
                "LD108",
                f"OpenCV is used in {where} but no module of the project calls "
                "`cv2.setNumThreads(0)`: every worker starts a thread per core, num_workers x "
                "cores threads in all",
            )


def _first_opencv_use(
    project: Project, dataset: DatasetClass
) -> tuple[FunctionNode, DatasetClass, ast.Call, Path, str] | None:
    """The first worker method that calls OpenCV, itself, through an OpenCV-backed library
    (named, last), or through project functions."""
    starts = dataset.worker_methods()
    for method, owner in starts:  # a direct use first, as a reader sees it
        use = _opencv_call(owner.module, method)
        if use is not None:
            return method, owner, use, Path(()), ""
    for method, owner in starts:  # then a library transform the Dataset holds or builds
        held = library_opencv_call(project, Caller(owner.module, method, owner.node, dataset))
        if held is not None:
            return method, owner, held[0], Path(()), held[1]
    for method, owner in starts:
        start = Caller(owner.module, method, owner.node, dataset)
        for reached, path in project.graph.reach(start):
            if not path.edges:
                continue
            use = _opencv_call(reached.module, reached.function)
            if use is not None:
                return method, owner, use, path, ""
            held = library_opencv_call(project, reached) if reached.cls is not None else None
            if held is not None:  # an imgaug augmenter that self.x holds, said by its path
                return method, owner, held[0], path, held[1]
    return None


def _opencv_call(model: ModuleModel, function: ast.AST) -> ast.Call | None:
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            name = model.scopes.qualified(node.func) or ""
            if name.startswith("cv2.") and name not in OPENCV_WITHOUT_POOL:
                return node
    return None


# OpenCV calls measured to start no thread (scripts/opencv_threads.py: a fresh process per
# call on a 1024x1024 image, threads counted in /proc/self/task before and after; OpenCV 5.1.0
# headless, 2026-12-03): decoding and encoding files, splitting and merging channels, flipping,
# padding, drawing, building a rotation matrix. cvtColor, resize, warpAffine, warpPerspective,
# remap, GaussianBlur, filter2D, LUT, calcHist, equalizeHist, threshold, dilate, normalize and
# addWeighted each started the pool. blur and medianBlur started none at 5x5 but take
# OpenCV's parallel path at other sizes and types, so they stay flagged.
OPENCV_WITHOUT_POOL = frozenset(
    {
        "cv2.imread",
        "cv2.imdecode",
        "cv2.imencode",
        "cv2.imwrite",
        "cv2.split",
        "cv2.merge",
        "cv2.flip",
        "cv2.copyMakeBorder",
        "cv2.rectangle",
        "cv2.line",
        "cv2.circle",
        "cv2.putText",
        "cv2.getRotationMatrix2D",
        "cv2.setNumThreads",
        "cv2.getNumThreads",
        "cv2.ocl.setUseOpenCL",
    }
)


# Libraries whose image transforms call OpenCV (resize, warp, blur, imread): calling one in a
# worker starts OpenCV's thread pool there as a direct cv2 call does.
OPENCV_LIBRARIES = ("albumentations", "imgaug", "mmcv")


def opencv_library(name: str) -> bool:
    return name.split(".")[0] in OPENCV_LIBRARIES


def library_opencv_call(project: Project, caller: Caller) -> tuple[ast.Call, str] | None:
    """A call in ``caller`` of an OpenCV-backed library (``A.Resize(...)(image=x)``,
    ``mmcv.imread(path)``) or of a transform of one the Dataset holds (``self.aug(image=x)``,
    set in ``__init__`` or passed to it by the project)."""
    model = caller.module
    for node in walk_local(caller.function):
        if not isinstance(node, ast.Call):
            continue
        name = model.scopes.qualified(node.func) or ""
        if opencv_library(name):
            return node, name
        if is_self_attribute(node.func) and caller.cls is not None:
            assert isinstance(node.func, ast.Attribute)
            for module, value in project.graph.attribute_values(caller, node.func.attr):
                built = _library_transform(project, module, value, 0)
                if built is not None:
                    return node, built
    return None


def _library_transform(
    project: Project, model: ModuleModel, value: ast.AST | None, depth: int
) -> str | None:
    """The constructor, when ``value`` is a transform of an OpenCV-backed library: built here,
    held by a variable, or returned by a project function (``get_train_transforms()``)."""
    if depth > 3 or value is None:
        return None
    candidates: list[tuple[ModuleModel, ast.AST | None]] = []
    if isinstance(value, ast.Name):
        bindings = model.scopes.lookup(value.id, value)[:4]
        candidates = [(model, b) for b in bindings if isinstance(b, ast.expr)]
    elif isinstance(value, ast.Call):
        name = model.scopes.qualified(value.func) or ""
        if opencv_library(name):
            return name
        found = project.function(model, value.func)
        if found is not None:
            returns = [n for n in walk_local(found[1]) if isinstance(n, ast.Return)]
            candidates = [(found[0], n.value) for n in returns]
    for module, candidate in candidates:
        built = _library_transform(project, module, candidate, depth + 1)
        if built is not None:
            return built
    return None


# -- LD109 -------------------------------------------------------------------------------------


def check_copied_generators(project: Project) -> Iterator[Hit]:
    seen: set[int] = set()
    for dataset in project.worker_datasets():
        for held in held_objects(project, dataset):
            for attr, value in own_assignments(project, held):
                factory = _rng_factory(held.module, value)
                if factory is None or id(value) in seen or not drawn_in(held, attr):
                    continue
                if _reseeded_by_name(project, attr):
                    continue
                seen.add(id(value))
                yield Hit(
                    held.module,
                    value,
                    "LD109",
                    f"`self.{attr} = {factory}(...)` is created in `{held.cls.name}.__init__`, and "
                    f"`{dataset.name}` holds that object in `self.{held.path}` and uses it in "
                    f"`{held.user}`: every worker gets a copy of the same generator state, so "
                    "the random augmentations repeat num_workers times",
                    fix=(
                        "Reseed it in every worker, in worker_init_fn: `info = torch.utils.data."
                        f"get_worker_info(); info.dataset.{held.path}.{attr} = "
                        "np.random.default_rng(info.seed)` (or draw from the global generators)."
                    ),
                )
        workers = dataset.worker_methods()
        for attr, value, _, owner in init_assignments(dataset):
            factory = _rng_factory(owner.module, value)
            if factory is None or _reseeded(project, dataset, attr):
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


def _reseeded(project: Project, dataset: DatasetClass, attr: str) -> bool:
    if stored_elsewhere(project, dataset, attr):
        return True
    return _reseeded_by_name(project, attr)


def _reseeded_by_name(project: Project, attr: str) -> bool:
    """``x.rng.seed(...)`` or ``x.rng = ...`` anywhere: a worker_init_fn that reseeds it."""
    for module in project.modules:
        for holder in module.scopes.attributes.get(attr, ()):
            node = module.scopes.parents.get(holder)
            if isinstance(node, ast.Attribute) and node.value is holder:
                if node.attr in _RESEEDS or node.attr == "bit_generator":
                    return True
                if isinstance(node.ctx, ast.Store):
                    return True
    return False
