"""LD107: big deserialised Python objects kept on a Dataset, copied page by page into workers.

The trigger is what a reader would call "a big Python object": the result of ``json.load``,
``pickle.load``, ``yaml.safe_load``, a COCO index, ``csv.DictReader`` rows, pandas rows turned into
dicts or tuples, and lists or dicts of per-record dicts/tuples built from any of those, kept on
``self`` directly, through a local, accumulated over files (``self.x += json.load(f)``) or filled
in a loop. Lists of file names (``os.listdir``, ``glob``, ``Path.iterdir``, the lines of a text
file) and lists of ids are only ``info``: harmless at a few thousand entries (pytorch#13246).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from loaderdoctor.lint.calls import bind_arguments
from loaderdoctor.lint.model import DatasetClass, FunctionNode, Hit, ModuleModel
from loaderdoctor.lint.project import Project
from loaderdoctor.lint.rules_dataset import uses_self_attribute
from loaderdoctor.lint.scope import is_self_attribute

_DESERIALISERS = {
    "json.load": "json.load",
    "json.loads": "json.loads",
    "ujson.load": "ujson.load",
    "ujson.loads": "ujson.loads",
    "orjson.loads": "orjson.loads",
    "simplejson.load": "simplejson.load",
    "pickle.load": "pickle.load",
    "pickle.loads": "pickle.loads",
    "cPickle.load": "pickle.load",
    "_pickle.load": "pickle.load",
    "joblib.load": "joblib.load",
    "dill.load": "dill.load",
    "yaml.load": "yaml.load",
    "yaml.safe_load": "yaml.safe_load",
    "yaml.full_load": "yaml.full_load",
    "yaml.unsafe_load": "yaml.unsafe_load",
    "msgpack.unpack": "msgpack.unpack",
    "msgpack.unpackb": "msgpack.unpackb",
    "csv.DictReader": "csv.DictReader",
    "csv.reader": "csv.reader",
    "pycocotools.coco.COCO": "a COCO index (pycocotools)",
    "lvis.LVIS": "an LVIS index",
    "mmcv.load": "mmcv.load",
    "mmengine.load": "mmengine.load",
    # A record written as a Python literal on each line: eval(line), ast.literal_eval(line).
    "eval": "eval",
    "ast.literal_eval": "ast.literal_eval",
}
# Loaders whose result is often tensors or arrays (no copy-on-read) but may be Python objects.
_MAYBE_OBJECTS = {"torch.load": "torch.load", "numpy.load": "numpy.load(allow_pickle=True)"}
_LISTINGS = {
    "os.listdir": "os.listdir",
    "os.scandir": "os.scandir",
    "os.walk": "os.walk",
    "glob.glob": "glob.glob",
    "glob.iglob": "glob.iglob",
}
_LISTING_METHODS = frozenset({"glob", "rglob", "iterdir", "readlines", "splitlines"})
_FILE_OPENERS = frozenset({"open", "io.open", "gzip.open", "bz2.open", "codecs.open"})
# Turning a Python object into few big buffers: the fix itself.
_SAFE_SINKS = frozenset(
    {
        "numpy.array",
        "numpy.asarray",
        "numpy.stack",
        "numpy.concatenate",
        "numpy.frombuffer",
        "numpy.fromiter",
        "numpy.memmap",
        "torch.tensor",
        "torch.as_tensor",
        "torch.from_numpy",
        "torch.stack",
        "torch.cat",
        "pandas.DataFrame",
        "pyarrow.array",
        "pyarrow.table",
        "pyarrow.Table.from_pylist",
        "pyarrow.Table.from_pandas",
        "len",
        "int",
        "float",
        "bool",
        "str",
        "max",
        "min",
        "sum",
        "range",
    }
)
_PASS_THROUGH = frozenset(
    {"list", "sorted", "tuple", "dict", "set", "reversed", "filter", "enumerate", "zip", "iter"}
)
_SAME_KIND_METHODS = frozenset({"items", "values", "keys", "get", "copy", "pop", "setdefault"})
_ROW_METHODS = frozenset({"iterrows", "itertuples", "to_dict", "to_records"})
_MAX_DEPTH = 3
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_PATH_BUILDERS = frozenset(
    {
        "os.path.join",
        "os.path.abspath",
        "os.path.normpath",
        "os.path.realpath",
        "os.path.relpath",
        "os.path.basename",
        "os.path.splitext",
        "os.path.expanduser",
        "pathlib.Path",
        "Path",
        "str",
        "os.fspath",
    }
)
_STRING_METHODS = frozenset({"replace", "strip", "rstrip", "lstrip", "format", "lower", "upper"})
# pycocotools.coco.COCO methods that return the index's own records (lists of dicts).
_COCO_RECORDS = frozenset({"loadImgs", "loadAnns", "loadCats"})
# A helper module not parsed yet is read for a loader function only if it could hold one.
_LOADS_SOMETHING = re.compile(
    r"json|pickle|yaml|torch\.load|np\.load|numpy|msgpack|csv|COCO|LVIS|read_|joblib|mmcv|listdir|glob"
)

# Levels: what a value is, from harmless to copy-on-read trouble.
_NONE, _NEUTRAL, _INFO, _ROW, _BIG = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class _Kind:
    level: int
    what: str  # in words, for the message
    source: str = ""  # the call it came from (json.load)
    from_rows: bool = False  # a field of a loaded record (r["file"]): a tuple of these is a record

    def stronger(self, other: _Kind) -> _Kind:
        return other if other.level > self.level else self


NONE = _Kind(_NONE, "")
_ARRAY = _Kind(_NEUTRAL, "a numpy array")
# yolov5's label cache: a dict of per-image numpy arrays pickled into an .npy file. Reading it
# copies the pages of the containers and of every array's object header, not the arrays' data.
_PICKLED_CACHE = _Kind(
    _BIG,
    "Python objects unpickled from `numpy.load(allow_pickle=True)` (per-entry lists, tuples "
    "and numpy array headers; what grows per worker is those objects, not the array data)",
    "numpy.load(allow_pickle=True)",
)
# One dict of numpy arrays per item: each read writes the dict's and the arrays' object headers,
# spread over the pages the per-item objects sit on, not the arrays' data.
_ARRAY_RECORDS = _Kind(
    _BIG,
    "per-item dicts of numpy arrays (a dict and an array header per item are Python objects; "
    "what grows per worker is those, not the array data)",
    "numpy",
)
_NUMBER_RECORDS = _Kind(
    _BIG,
    "per-record lists of numbers parsed from text (a list and a Python int or float per value)",
    "int/float",
)
# A list of the rows of one array ([table[i] for i in range(len(table))], list(table)): each
# row is a numpy view, a Python object of its own that reading writes the refcount of.
_ROW_VIEWS = _Kind(
    _BIG,
    "a list of per-row numpy views (one array object per row; what grows per worker is those "
    "objects, not the array data)",
    "numpy",
)
# One record's values parsed from text ([v == "1" for v in fields], label.append(int(v))): a
# list of Python objects that alone is small; kept once per record it is a table of them.
_PARSED_LIST = _Kind(_NEUTRAL, "a list of values parsed from text")
# counts[(head, relation, kind)] += 1 in a loop over the records: a dict with a tuple key
# (a tuple and its items, each a Python object) per record.
_TUPLE_KEYS = _Kind(
    _BIG,
    "a dict keyed by per-record tuples (a tuple and its items per key, filled in a loop)",
    "tuple keys",
)
# torch.Tensor(boxes) or np.array(boxes) of one record's numbers parsed from text, kept per
# record: a tensor or array object (and its own small buffer) per record.
_PARSED_ARRAYS = _Kind(
    _BIG,
    "per-record tensors or arrays of numbers parsed from text (an object and a small buffer "
    "per record)",
    "int/float",
)
_ARRAY_BUILDERS = frozenset(
    {
        "torch.Tensor",
        "torch.tensor",
        "torch.as_tensor",
        "torch.FloatTensor",
        "torch.LongTensor",
        "torch.IntTensor",
        "numpy.array",
        "numpy.asarray",
    }
)
_FILE = _Kind(_NEUTRAL, "an open file")
_FRAME = _Kind(_NEUTRAL, "a pandas DataFrame")
_SAFE = _Kind(_NONE, "safe")


def _loaded(source: str) -> _Kind:
    if source.startswith(("a COCO", "an LVIS")):
        return _Kind(_BIG, source, source)
    return _Kind(_BIG, f"the result of `{source}`", source)


def _records(source: str) -> _Kind:
    if source.startswith(("a COCO", "an LVIS")):
        return _Kind(_BIG, f"per-record Python objects built from {source}", source)
    return _Kind(_BIG, f"per-record Python objects built from `{source}` data", source)


def _row(source: str) -> _Kind:
    return _Kind(_ROW, f"a record of `{source}` data", source)


def _listing(what: str, source: str) -> _Kind:
    return _Kind(_INFO, what, source)


# Library Datasets whose own __init__ keeps a big Python object (not visible in the project).
_LIBRARY_TABLES = {
    "torchvision.datasets.CocoDetection": ("coco", "a COCO index (pycocotools)"),
    "torchvision.datasets.CocoCaptions": ("coco", "a COCO index (pycocotools)"),
    "torchvision.datasets.coco.CocoDetection": ("coco", "a COCO index (pycocotools)"),
}


def check_python_object_tables(project: Project) -> Iterator[Hit]:
    for dataset in project.worker_datasets():
        yield from _library_tables(dataset)
        workers = dataset.worker_methods()
        if not workers:
            continue
        attributes: dict[str, tuple[_Kind, ast.AST, DatasetClass]] = {}
        converted: set[str] = set()
        arrays: set[str] = set()
        for function, owner in dataset.init_methods():
            flow = _Flow(project, owner.module, owner, 0)
            if function.name == "__init__" and owner is dataset:
                flow.seed(_passed_in(project, dataset, function))
            flow.run(function)
            converted |= flow.converted
            arrays |= flow.arrays
            for attr, (kind, node) in flow.attributes.items():
                known = attributes.get(attr)
                if known is None or kind.level > known[0].level:
                    attributes[attr] = (kind, node, owner)
        reported: set[int] = set()
        for attr, (kind, node, owner) in attributes.items():
            if attr in converted or kind.level < _INFO or kind.level == _ROW:
                continue
            user = uses_self_attribute(workers, attr)
            if user is None:
                continue
            if kind.level == _BIG and attr in arrays and kind.source in _UNPICKLERS:
                kind = _unpickled_arrays(kind.source)  # the cache is the arrays built here
            if kind.level == _BIG:
                if id(kind) in reported:
                    continue  # self.cfg = data; self.samples = data["list"]: one object, once
                reported.add(id(kind))
            yield _hit(dataset, owner, attr, kind, node, user)


def _passed_in(project: Project, dataset: DatasetClass, init: FunctionNode) -> dict[str, _Kind]:
    """What the project's constructions of the Dataset pass to ``__init__``: a roidb loaded
    from a pickle cache by the training script and handed in (argument flow, across modules)."""
    return _passed_to(project, dataset.module, dataset.node, init, method=True, depth=0)


def _passed_to(
    project: Project,
    module: ModuleModel,
    definition: ast.ClassDef | FunctionNode,
    function: FunctionNode,
    method: bool,
    depth: int,
) -> dict[str, _Kind]:
    """What the project's calls of ``definition`` pass to ``function``'s parameters, each
    argument read where its call is made; a call inside a project function (a ``get_loader``
    factory) reads that function's own parameters from its callers in turn, once more."""
    passed: dict[str, _Kind] = {}
    for caller_module, call in project.constructions(module, definition):
        scope = caller_module.scopes.scope_of(call)
        caller = _Flow(project, caller_module, None, 1)
        caller.until = call.lineno  # what the arguments hold when the call is made
        if isinstance(scope, _FUNCTIONS) and depth < 1:
            key = ("LD107 passed to", id(scope))
            if key not in project.memo:
                project.memo[key] = _passed_to(project, caller_module, scope, scope, False, 1)
            caller.seed(project.memo[key])  # type: ignore[arg-type]
        if not isinstance(scope, ast.Lambda):
            caller.run(scope)
        for name, value in bind_arguments(call, function, method=method).items():
            kind = caller.kind(value)
            if kind.level:
                passed[name] = passed.get(name, NONE).stronger(kind)
    return passed


def _library_tables(dataset: DatasetClass) -> Iterator[Hit]:
    for base in dataset.node.bases:
        name = dataset.module.scopes.qualified(base) or ""
        if name in _LIBRARY_TABLES:
            attr, what = _LIBRARY_TABLES[name]
            yield Hit(
                dataset.module,
                base,
                "LD107",
                f"`{dataset.name}` derives from `{name}`, which keeps {what} in `self.{attr}` "
                "and reads it in every worker: reading Python objects writes their reference "
                "counts, so each worker copies every page they sit on and memory grows by "
                "num_workers x its size over the epoch (copy-on-read)",
            )


_UNPICKLERS = frozenset({"pickle.load", "pickle.loads", "joblib.load", "torch.load", "dill.load"})


def _unpickled_arrays(source: str) -> _Kind:
    return _Kind(_INFO, f"numpy arrays unpickled by `{source}`", source)


def _hit(
    dataset: DatasetClass, owner: DatasetClass, attr: str, kind: _Kind, node: ast.AST, user: str
) -> Hit:
    if kind.level == _INFO and kind.what.startswith("numpy arrays"):
        return Hit(
            owner.module,
            node,
            "LD107",
            f"`{dataset.name}.{attr}` is a Python list of {kind.what} (the same arrays "
            f"`__init__` builds when there is no cache), read in `{user}`: reading it copies "
            "only the list and each array's header per worker, not the array data",
            severity="info",
        )
    if kind.level >= _BIG:
        return Hit(
            owner.module,
            node,
            "LD107",
            f"`{dataset.name}.{attr}` keeps {kind.what} and `{user}` reads it in every worker: "
            "reading Python objects writes their reference counts, so each worker copies every "
            "page they sit on and memory grows by num_workers x its size over the epoch "
            "(copy-on-read)",
        )
    return Hit(
        owner.module,
        node,
        "LD107",
        f"`{dataset.name}.{attr}` is a Python list of {kind.what}, read in `{user}`: harmless "
        "for thousands of entries; at millions, each worker copies it as it reads "
        "(copy-on-read)",
        severity="info",
    )


class _Flow:
    """What each local and each ``self.x`` of one function holds, in two passes over it."""

    def __init__(
        self, project: Project, model: ModuleModel, owner: DatasetClass | None, depth: int
    ) -> None:
        self.project = project
        self.model = model
        self.owner = owner
        self.depth = depth
        self.env: dict[str, _Kind] = {}
        self.attributes: dict[str, tuple[_Kind, ast.AST]] = {}
        self.converted: set[str] = set()
        self.arrays: set[str] = set()  # self.x filled with numpy arrays (x[i] = np.loadtxt(...))
        self.returns = NONE
        self.until: int | None = None  # stop before the statement holding this line (a call)
        self.loops = 0  # how many loops the statement being read is in

    def run(self, function: ast.AST) -> None:
        body = getattr(function, "body", [])
        for _ in range(2):  # a container filled in a loop and assigned after it
            self._block(body if isinstance(body, list) else [])

    # -- statements ------------------------------------------------------------------------

    def _block(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            if self.until is not None and _at_or_after(statement, self.until):
                return
            self._statement(statement)

    def _statement(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value
            if value is None:
                return
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            kind = self.kind(value)
            for target in targets:
                self._store(target, kind, value)
        elif isinstance(node, ast.AugAssign):
            kind = self.kind(node.value)
            if isinstance(node.op, ast.Add) and kind.level >= _ROW:
                kind = _records(kind.source) if kind.level == _ROW else kind
            self._store(node.target, kind, node.value, merge=True)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            self._fill_call(node.value)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self._bind_turn(node.target, node.iter, self._item(self.kind(node.iter)))
            self.loops += 1
            self._block(node.body)
            self.loops -= 1
            self._block(node.orelse)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    self._bind(item.optional_vars, self.kind(item.context_expr))
            self._block(node.body)
        elif isinstance(node, ast.If):  # either branch may run: what each binds, merged
            before = dict(self.env)
            self._block(node.body)
            taken, self.env = self.env, before
            self._block(node.orelse)
            for name, kind in taken.items():
                self.env[name] = self.env.get(name, NONE).stronger(kind)
        elif isinstance(node, ast.While):
            self._block(node.body)
            self._block(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                self._block(block)
            for handler in node.handlers:
                self._block(handler.body)
        elif isinstance(node, ast.Return) and node.value is not None:
            self.returns = self.returns.stronger(self.kind(node.value))

    def _store(self, target: ast.AST, kind: _Kind, value: ast.AST, merge: bool = False) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = self.env.get(target.id, NONE).stronger(kind) if merge else kind
        elif is_self_attribute(target):
            assert isinstance(target, ast.Attribute)
            if kind is _SAFE:
                self.converted.add(target.attr)
            self._attribute(target.attr, kind, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:  # images, anns = json.load(f)
                self._store(element, kind, value, merge)
        elif isinstance(target, ast.Subscript):
            if kind is _ARRAY and is_self_attribute(target.value):
                assert isinstance(target.value, ast.Attribute)
                self.arrays.add(target.value.attr)
            if self.loops and isinstance(target.slice, ast.Tuple) and len(target.slice.elts) > 1:
                self._fill(target.value, _TUPLE_KEYS, value)
                return
            self._fill(target.value, self._element(value), value)

    def _looked_up(self, node: ast.AST, depth: int) -> bool:
        """``mapping[key]`` with a key that changes per turn, of a loaded mapping."""
        if not isinstance(node, ast.Subscript) or isinstance(node.slice, (ast.Constant, ast.Slice)):
            return False
        base = self.kind(node.value, depth + 1)
        return base.level == _BIG and not base.what.startswith("per-record")

    def _bind_turn(self, target: ast.AST, iterable: ast.AST, kind: _Kind) -> None:
        """What a loop binds per turn; ``i`` of ``for i, record in enumerate(data)`` is an int."""
        if (
            isinstance(iterable, ast.Call)
            and isinstance(iterable.func, ast.Name)
            and iterable.func.id == "enumerate"
            and isinstance(target, ast.Tuple)
            and len(target.elts) == 2
        ):
            self._bind(target.elts[0], NONE)
            self._bind(target.elts[1], kind)
        else:
            self._bind(target, kind)

    def _bind(self, target: ast.AST, kind: _Kind) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                self.env[node.id] = kind

    def _attribute(self, attr: str, kind: _Kind, node: ast.AST) -> None:
        known = self.attributes.get(attr)
        if known is None or kind.level > known[0].level:
            self.attributes[attr] = (kind, node)

    def _fill_call(self, call: ast.Call) -> None:
        """``x.append(record)``, ``self.x.extend(json.load(f))``, ``x.update(...)``."""
        func = call.func
        if not isinstance(func, ast.Attribute) or not call.args:
            return
        if func.attr in ("append", "add", "insert"):
            self._fill(func.value, self._element(call.args[-1]), call)
        elif func.attr in ("extend", "update"):
            kind = self.kind(call.args[0])
            if kind.level == _ROW:
                kind = _records(kind.source)
            self._fill(func.value, kind, call)

    def _fill(self, container: ast.AST, kind: _Kind, node: ast.AST) -> None:
        while True:  # groups[key].append(record), groups.setdefault(key, []).append(record)
            if isinstance(container, ast.Subscript):
                container = container.value
            elif (
                isinstance(container, ast.Call)
                and isinstance(container.func, ast.Attribute)
                and container.func.attr in ("setdefault", "get")
            ):
                container = container.func.value
            else:
                break
        if isinstance(container, ast.Name):
            self.env[container.id] = self.env.get(container.id, NONE).stronger(kind)
        elif is_self_attribute(container):
            assert isinstance(container, ast.Attribute)
            self._attribute(container.attr, kind, node)

    def _element(self, value: ast.AST) -> _Kind:
        """What a container holds once ``value`` is put in it, once per record."""
        if _parsed_numbers(value):
            return _NUMBER_RECORDS  # truth[name].append([int(float(v)) for v in box.split(",")])
        if _parsed_value(value):
            return _PARSED_LIST  # label.append(values[idx] == "1")
        if (
            isinstance(value, ast.Call)
            and value.args
            and (self.model.scopes.qualified(value.func) or "") in _ARRAY_BUILDERS
            and self.kind(value.args[0]) in (_PARSED_LIST, _NUMBER_RECORDS)
        ):
            # self.boxes.append(torch.Tensor(box)), box parsed per line: a kind of its own per
            # append, so that boxes and labels are two tables, not one object said once
            return _Kind(_PARSED_ARRAYS.level, _PARSED_ARRAYS.what, _PARSED_ARRAYS.source)
        if isinstance(value, (ast.List, ast.Tuple)) and any(
            self.kind(element) is _PARSED_LIST for element in value.elts
        ):
            return _NUMBER_RECORDS  # records.append([file_name, label]), label parsed per line
        kind = self.kind(value)
        if kind.level >= _ROW:
            return _records(kind.source)
        if isinstance(value, (ast.Tuple, ast.List, ast.Dict)):
            elements = value.values if isinstance(value, ast.Dict) else value.elts
            kinds = [self.kind(element) for element in elements]
            for inner in kinds:
                if inner.level == _INFO:
                    return _listing(f"tuples holding {inner.what}", inner.source)
            if isinstance(value, ast.Dict) and any(inner is _ARRAY for inner in kinds):
                return _ARRAY_RECORDS  # {"points": cloud[:, :3], "labels": cloud[:, 3]} per item
            return NONE  # tuples of values computed here (a schedule, a grid): not data
        if kind.level == _INFO:
            return kind
        return NONE

    # -- expressions -----------------------------------------------------------------------

    def kind(self, node: ast.AST | None, depth: int = 0) -> _Kind:
        if node is None or depth > 12:
            return NONE
        if isinstance(node, ast.Name):
            return self.env.get(node.id, NONE)
        if isinstance(node, ast.Attribute):
            if is_self_attribute(node):
                known = self.attributes.get(node.attr)
                return known[0] if known else NONE
            base = self.kind(node.value, depth + 1)
            if base.level == _BIG or base is _FRAME:
                return base
            return _field(base)
        if isinstance(node, ast.Subscript):
            base = self.kind(node.value, depth + 1)
            if base is _ARRAY:
                return _ARRAY  # point_set[0:n, :]
            if base.level == _BIG and not base.what.startswith("per-record"):
                return base  # data["annotations"], cache[root]
            if base.level == _BIG and not isinstance(node.slice, ast.Slice):
                return _row(base.source)  # annotations[i]: one record, as a loop over them binds
            if base is _FRAME:
                return base
            return _field(base)
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return self._comprehension(node, depth)
        if isinstance(node, ast.Starred):  # zip(*cache.values())
            return self.kind(node.value, depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.kind(node.left, depth + 1).stronger(self.kind(node.right, depth + 1))
        if isinstance(node, ast.IfExp):
            return self.kind(node.body, depth + 1).stronger(self.kind(node.orelse, depth + 1))
        if isinstance(node, ast.BoolOp):
            found = NONE
            for value in node.values:
                found = found.stronger(self.kind(value, depth + 1))
            return found
        if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            elements = node.values if isinstance(node, ast.Dict) else node.elts
            for element in elements:
                kind = self.kind(element, depth + 1)
                if kind.level >= _ROW or kind.from_rows:
                    return _records(kind.source)  # (r["file"], r["label"]) per record
            return NONE
        return NONE

    def _call(self, node: ast.Call, depth: int) -> _Kind:
        scopes = self.model.scopes
        name = scopes.qualified(node.func) or ""
        if name in _DESERIALISERS:
            return _loaded(_DESERIALISERS[name])
        if name in _MAYBE_OBJECTS:
            if name == "numpy.load" and not _allows_pickle(node):
                return _ARRAY
            return _Kind(_INFO, f"objects loaded with `{_MAYBE_OBJECTS[name]}`", name)
        if name.startswith("pandas.read_"):
            return _FRAME
        if name in _LISTINGS:
            return _listing(f"file names from `{_LISTINGS[name]}`", name)
        if name in _FILE_OPENERS:
            return _FILE
        if name in _SAFE_SINKS:
            return _SAFE
        if name.startswith("numpy.") or (
            isinstance(node.func, ast.Attribute) and node.func.attr == "astype"
        ):
            return _ARRAY
        if name in ("list", "builtins.list") and len(node.args) == 1:
            if self.kind(node.args[0], depth + 1) is _ARRAY:
                return _ROW_VIEWS  # list(table): one view per row
        if name in _PASS_THROUGH and node.args:
            return self.kind(node.args[-1], depth + 1)
        func = node.func
        if isinstance(func, ast.Attribute):
            found_kind = self._method_call(node, func, depth)
            if found_kind is not None:
                return found_kind
        if isinstance(func, (ast.Name, ast.Attribute)) and self.depth < _MAX_DEPTH:
            found = self.project.function(self.model, func, _LOADS_SOMETHING)
            if found is not None:
                flow = _Flow(self.project, found[0], None, self.depth + 1)
                flow.seed(self._arguments(node, found[1], method=False, depth=depth))
                flow.run(found[1])
                return flow.returns
        # os.path.join(root, name) of a listed name is still a name; lmdb.open(name) is not.
        receiver = func.value if isinstance(func, ast.Attribute) else None
        method = func.attr if isinstance(func, ast.Attribute) else ""
        if name in _PATH_BUILDERS or method in _STRING_METHODS:
            for argument in (*node.args, receiver):
                argument_kind = self.kind(argument, depth + 1)
                if argument_kind.level == _INFO:
                    return argument_kind
        return NONE

    def _method_call(self, node: ast.Call, func: ast.Attribute, depth: int) -> _Kind | None:
        """``x.method(...)``: what a method of a known value returns (None: not known here)."""
        base = self.kind(func.value, depth + 1)
        if func.attr in _LISTING_METHODS:
            source = "lines of a text file" if "lines" in func.attr else "file names"
            return _listing(source, f".{func.attr}()")
        if func.attr == "split" and isinstance(func.value, ast.Call):
            inner = func.value.func
            if isinstance(inner, ast.Attribute) and inner.attr == "read":
                return _listing("lines of a text file", ".read().split()")
        if base is _FRAME:
            if func.attr in _ROW_METHODS and func.attr != "to_records":
                return _records(f"DataFrame.{func.attr}")
            if func.attr in ("tolist", "to_list"):
                if _is_whole_frame(func.value):
                    return _records("DataFrame.values.tolist")
                return _listing("column values from a DataFrame", "tolist")
            return _FRAME if func.attr not in ("to_records", "to_numpy") else NONE
        if func.attr == "item" and base.source == "numpy.load":
            return _PICKLED_CACHE  # np.load(cache, allow_pickle=True).item(): a dict
        if base.source.startswith("a COCO") and func.attr in _COCO_RECORDS:
            return _row(base.source)  # coco.loadImgs(id_)[0]: one image's record
        if base.level == _BIG and func.attr == "keys":
            return _listing("ids (the keys of loaded data)", base.source)
        if base.level == _BIG and func.attr in _SAME_KIND_METHODS:
            return base
        receiver = func.value
        if isinstance(receiver, ast.Name) and receiver.id == "self" and self.owner:
            return self._helper_method(func.attr, node, depth)
        return None

    def _helper_method(self, name: str, call: ast.Call, depth: int) -> _Kind:
        assert self.owner is not None
        found = self.owner.find(name)
        if found is None or self.depth >= _MAX_DEPTH:
            return NONE
        function, owner = found
        flow = _Flow(self.project, owner.module, owner, self.depth + 1)
        flow.attributes = dict(self.attributes)  # self.coco set before the helper is called
        flow.seed(self._arguments(call, function, method=True, depth=depth))
        flow.run(function)
        return flow.returns

    def _arguments(
        self, call: ast.Call, function: FunctionNode, method: bool, depth: int
    ) -> dict[str, _Kind]:
        """What each parameter of ``function`` holds in this call (argument flow)."""
        bound = bind_arguments(call, function, method)
        return {name: self.kind(value, depth + 1) for name, value in bound.items()}

    def seed(self, parameters: dict[str, _Kind]) -> None:
        """Parameters that hold loaded records. A listed name is not seeded: one name from a
        listing and the listing itself look alike here, and a name passed in is one name."""
        self.env.update(
            {k: kind for k, kind in parameters.items() if kind.level >= _ROW or kind is _ARRAY}
        )

    def _item(self, iterable: _Kind) -> _Kind:
        """What a loop over ``iterable`` binds per turn."""
        if iterable is _FILE:
            return _listing("lines of a text file", "open")
        if iterable.level == _BIG:
            return _row(iterable.source)
        if iterable is _FRAME:
            return _row("DataFrame")
        return iterable if iterable.level == _INFO else NONE

    def _comprehension(
        self,
        node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp,
        depth: int,
    ) -> _Kind:
        saved = dict(self.env)
        try:
            source = NONE
            for generator in node.generators:
                iterable = self.kind(generator.iter, depth + 1)
                self._bind_turn(generator.target, generator.iter, self._item(iterable))
                source = source.stronger(iterable)
            element: ast.AST = node.value if isinstance(node, ast.DictComp) else node.elt
            if self._row_of_array(node, element, depth):
                return _ROW_VIEWS
            if isinstance(node, ast.ListComp) and _parsed_value(element):
                return _PARSED_LIST  # [value == "1" for value in values]
            if self._looked_up(element, depth):
                # [class_to_idx[name] for name in names]: one value per turn, often a small int;
                # a flat list of them is not a table of Python records.
                return _listing("values looked up in loaded data", self.kind(element).source)
            kind = self.kind(element, depth + 1)
            if kind.level >= _ROW:
                return _records(kind.source)  # [json.loads(line) for line in f], [r for r in data]
            rows = source.level == _BIG or source is _FRAME
            if isinstance(element, (ast.Tuple, ast.List, ast.Dict)) or (
                isinstance(element, ast.Call) and _is_dict_or_tuple(element)
            ):
                if rows:
                    return _records(source.source or "DataFrame")
                return _listing("tuples or dicts per file", source.source) if source.level else NONE
            if rows:
                return _listing("ids or values taken from loaded data", source.source)
            return source if source.level == _INFO else NONE
        finally:
            self.env = saved

    def _row_of_array(
        self,
        node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp,
        element: ast.AST,
        depth: int,
    ) -> bool:
        """``[table[i] for i in range(len(table))]`` or ``[row for row in table]`` of a numpy
        array: one view per row, not the rows of a few big arrays picked by key."""
        if len(node.generators) != 1:
            return False
        generator = node.generators[0]
        target = generator.target
        if not isinstance(target, ast.Name):
            return False
        if isinstance(element, ast.Name) and element.id == target.id:
            return self.kind(generator.iter, depth + 1) is _ARRAY
        if not (
            isinstance(element, ast.Subscript)
            and isinstance(element.slice, ast.Name)
            and element.slice.id == target.id
        ):
            return False
        table = element.value
        counted = generator.iter
        if not (
            isinstance(counted, ast.Call)
            and isinstance(counted.func, ast.Name)
            and counted.func.id == "range"
            and len(counted.args) == 1
        ):
            return False
        size = counted.args[0]
        spelled = ast.dump(table)
        over_rows = (  # range(len(table)) or range(table.shape[0])
            isinstance(size, ast.Call)
            and isinstance(size.func, ast.Name)
            and size.func.id == "len"
            and size.args
            and ast.dump(size.args[0]) == spelled
        ) or (
            isinstance(size, ast.Subscript)
            and isinstance(size.value, ast.Attribute)
            and size.value.attr == "shape"
            and ast.dump(size.value.value) == spelled
        )
        return bool(over_rows) and self.kind(table, depth + 1) is _ARRAY


_COMPOUND = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try)


def _at_or_after(statement: ast.stmt, line: int) -> bool:
    """Whether ``statement`` starts after ``line``, or is the simple statement holding it (a
    block holding it is entered: what its first statements bind counts)."""
    if statement.lineno > line:
        return True
    end = statement.end_lineno or statement.lineno
    return end >= line and not isinstance(statement, _COMPOUND)


def _parsed_numbers(node: ast.AST) -> bool:
    """``[int(v) for v in text.split(",")]`` or ``[float(a), float(b)]``: numbers parsed into a
    list per record, where one numpy row would hold them without a Python object each."""
    if isinstance(node, ast.ListComp):
        elements: list[ast.expr] = [node.elt]
    elif isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) > 1:
        elements = node.elts
    else:
        return False
    return all(
        isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("int", "float")
        for e in elements
    )


def _parsed_value(node: ast.AST) -> bool:
    """``int(v)``, ``float(v)`` or a comparison of a field (``value == "1"``): one value
    parsed from text."""
    if isinstance(node, ast.Compare):
        return True
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id
        in (
            "int",
            "float",
        )
    )


def _field(base: _Kind) -> _Kind:
    if base.level == _ROW or base.from_rows:
        return _Kind(_INFO, "ids or values taken from loaded data", base.source, from_rows=True)
    return NONE


def _allows_pickle(node: ast.Call) -> bool:
    return any(
        keyword.arg == "allow_pickle"
        and isinstance(keyword.value, ast.Constant)
        and keyword.value.value is True
        for keyword in node.keywords
    )


def _is_whole_frame(node: ast.AST) -> bool:
    """``df.values`` or ``df.to_numpy()``, not ``df["column"]``."""
    if isinstance(node, ast.Attribute) and node.attr == "values":
        return not isinstance(node.value, ast.Subscript)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "to_numpy" and not isinstance(node.func.value, ast.Subscript)
    return False


def _is_dict_or_tuple(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id in ("dict", "tuple", "list")


__all__ = ["FunctionNode", "check_python_object_tables"]
