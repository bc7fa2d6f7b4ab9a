"""The facts every rule needs, computed once per module: DataLoader calls and Dataset classes."""

from __future__ import annotations

import ast
import enum
from dataclasses import dataclass, field

from loaderdoctor.lint.scope import UNKNOWN, Scopes, is_positive, walk_local

# DataLoader's positional parameters, in order (torch.utils.data.DataLoader.__init__).
LOADER_PARAMS = (
    "dataset",
    "batch_size",
    "shuffle",
    "sampler",
    "batch_sampler",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
)
_DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
_UNBOUND_LOADER_SPELLINGS = frozenset(
    {"DataLoader", "data.DataLoader", "torch.utils.data.DataLoader"}
)
_DATASET_BASE_PREFIXES = ("torch.utils.data.", "torchvision.datasets.")
_UNBOUND_DATASET_SPELLINGS = frozenset(
    {"Dataset", "IterableDataset", "data.Dataset", "data.IterableDataset"}
)
# Methods that run in the workers, and the ones the rules start from.
WORKER_ENTRY_METHODS = ("__getitem__", "__getitems__", "__iter__")


class Workers(enum.Enum):
    ZERO = "zero"
    POSITIVE = "positive"
    UNKNOWN = "unknown"


class StartMethod(enum.Enum):
    FORK = "fork"
    SPAWN = "spawn"  # spawn or forkserver: everything handed to workers is pickled
    UNKNOWN = "unknown"


class Placement(enum.Enum):
    UNGUARDED = "unguarded"  # runs when the module is imported
    GUARDED = "guarded"  # inside `if __name__ == "__main__":`
    NESTED = "nested"  # inside a function or class body


@dataclass
class LoaderCall:
    """One ``DataLoader(...)`` call with its arguments mapped to parameter names."""

    node: ast.Call
    arguments: dict[str, ast.expr]
    keywords: dict[str, ast.keyword]
    has_unpacking: bool
    workers: Workers
    workers_text: str
    start_method: StartMethod


@dataclass
class DatasetClass:
    node: ast.ClassDef
    explicit: bool  # derives from a Dataset; otherwise only duck-typed (__getitem__ + __len__)
    local: bool  # defined inside a function: cannot be pickled
    bases: list[DatasetClass] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.node.name

    def method(self, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for statement in self.node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if statement.name == name:
                    return statement
        for base in self.bases:
            found = base.method(name)
            if found is not None:
                return found
        return None

    def worker_methods(self) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        """The methods that run in workers: entry points and what they call on ``self``."""
        pending = [name for name in WORKER_ENTRY_METHODS if self.method(name) is not None]
        seen: set[str] = set()
        found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        while pending:
            name = pending.pop()
            if name in seen or name == "__init__":
                continue
            seen.add(name)
            method = self.method(name)
            if method is None:
                continue
            found.append(method)
            for node in ast.walk(method):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    if isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                        pending.append(node.func.attr)
        return found


class ModuleModel:
    """A parsed module and the facts the rules share."""

    def __init__(self, tree: ast.Module, source: str, notebook: bool = False) -> None:
        self.tree = tree
        self.source = source
        self.notebook = notebook
        self.scopes = Scopes(tree)
        self.classes: dict[str, ast.ClassDef] = {}
        self.calls: list[ast.Call] = []
        self._lines = source.splitlines(keepends=True)
        for node in self.scopes.nodes:
            if isinstance(node, ast.ClassDef):
                self.classes.setdefault(node.name, node)
            elif isinstance(node, ast.Call):
                self.calls.append(node)
        self.fork_everywhere = self._sets_fork_start_method()
        self.loaders = [self._loader(call) for call in self.calls if self._is_loader(call.func)]
        self.datasets = self._dataset_classes()

    def classes_in_order(self) -> list[ast.ClassDef]:
        return [node for node in self.scopes.nodes if isinstance(node, ast.ClassDef)]

    def segment(self, node: ast.AST) -> str:
        """The source text of ``node`` (ast.get_source_segment re-splits the file every call)."""
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if start is None or end is None or end > len(self._lines):
            return ""
        first = self._lines[start - 1].encode("utf-8")
        col, end_col = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
        if start == end:
            return first[col:end_col].decode("utf-8", "replace")
        parts = [first[col:].decode("utf-8", "replace"), *self._lines[start : end - 1]]
        parts.append(self._lines[end - 1].encode("utf-8")[:end_col].decode("utf-8", "replace"))
        return "".join(parts)

    # -- DataLoader calls --------------------------------------------------------------------

    def _is_loader(self, func: ast.expr) -> bool:
        name = self.scopes.qualified(func)
        if name is None:
            return False
        if name in _DATALOADERS or (
            name.startswith("loaderdoctor.") and name.endswith(".DataLoader")
        ):
            return True
        head = name.split(".")[0]
        return (
            name in _UNBOUND_LOADER_SPELLINGS
            and not self.scopes.is_imported(head)
            and head not in self.classes
            and not self.scopes.lookup(head, func)
        )

    def _loader(self, call: ast.Call) -> LoaderCall:
        arguments: dict[str, ast.expr] = {}
        keywords: dict[str, ast.keyword] = {}
        has_unpacking = False
        for position, argument in enumerate(call.args):
            if isinstance(argument, ast.Starred):
                has_unpacking = True
                break
            if position < len(LOADER_PARAMS):
                arguments[LOADER_PARAMS[position]] = argument
        for keyword in call.keywords:
            if keyword.arg is None:
                has_unpacking = True
            else:
                arguments[keyword.arg] = keyword.value
                keywords[keyword.arg] = keyword
        workers_node = arguments.get("num_workers")
        if workers_node is None:
            workers = Workers.UNKNOWN if has_unpacking else Workers.ZERO
            workers_text = "0 (the default)"
        else:
            value = self.scopes.evaluate(workers_node)
            if is_positive(value):
                workers = Workers.POSITIVE
            elif value == 0 and type(value) is int:
                workers = Workers.ZERO
            else:
                workers = Workers.UNKNOWN
            workers_text = self.segment(workers_node) or "?"
            if type(value) is int and workers_text != str(value):
                workers_text = f"{workers_text} (= {value})"
        return LoaderCall(
            node=call,
            arguments=arguments,
            keywords=keywords,
            has_unpacking=has_unpacking,
            workers=workers,
            workers_text=workers_text,
            start_method=self._start_method(arguments.get("multiprocessing_context")),
        )

    def _start_method(self, context: ast.expr | None) -> StartMethod:
        if context is None or (isinstance(context, ast.Constant) and context.value is None):
            return StartMethod.FORK if self.fork_everywhere else StartMethod.SPAWN
        method = self._method_name(context, depth=0)
        if method is None:
            return StartMethod.UNKNOWN
        return StartMethod.FORK if method == "fork" else StartMethod.SPAWN

    def _method_name(self, node: ast.AST, depth: int) -> str | None:
        if depth > 4:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "get_context" and node.args:
                return self._method_name(node.args[0], depth + 1)
        if isinstance(node, ast.Name):
            binding = self.scopes.single_binding(node.id, node)
            if isinstance(binding, ast.expr):
                return self._method_name(binding, depth + 1)
        return None

    def _sets_fork_start_method(self) -> bool:
        for call in self.calls:
            if isinstance(call.func, (ast.Attribute, ast.Name)):
                name = self.scopes.qualified(call.func) or ""
                if name.split(".")[-1] == "set_start_method" and call.args:
                    if self._method_name(call.args[0], depth=0) == "fork":
                        return True
        return False

    # -- placement ---------------------------------------------------------------------------

    def placement(self, node: ast.AST) -> Placement:
        child: ast.AST = node
        parent = self.scopes.parents.get(child)
        while parent is not None:
            if isinstance(
                parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
            ):
                return Placement.NESTED
            if isinstance(parent, ast.If) and _is_main_guard(parent.test):
                if any(child is statement for statement in parent.body):
                    return Placement.GUARDED
            child, parent = parent, self.scopes.parents.get(parent)
        return Placement.UNGUARDED

    # -- Dataset classes ---------------------------------------------------------------------

    def _dataset_classes(self) -> dict[str, DatasetClass]:
        nodes = list(self.classes_in_order())
        found: dict[ast.ClassDef, DatasetClass] = {}
        changed = True
        while changed:  # a class may derive from a Dataset defined further down the module
            changed = False
            for node in nodes:
                if node in found:
                    continue
                explicit = False
                bases: list[DatasetClass] = []
                for base in node.bases:
                    name = self.scopes.qualified(base) or ""
                    local = self.classes.get(name)
                    if local is not None and local in found:
                        explicit = explicit or found[local].explicit
                        bases.append(found[local])
                    elif name.startswith(_DATASET_BASE_PREFIXES) and name.endswith("Dataset"):
                        explicit = True
                    elif name in _UNBOUND_DATASET_SPELLINGS and not self.scopes.is_imported(
                        name.split(".")[0]
                    ):
                        explicit = True
                    elif name.startswith("torchvision.datasets."):
                        explicit = True
                methods = {
                    s.name
                    for s in node.body
                    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                }
                duck = {"__getitem__", "__len__"} <= methods
                if explicit or bases or duck:
                    local_class = self.scopes.enclosing(
                        node, (ast.FunctionDef, ast.AsyncFunctionDef)
                    )
                    found[node] = DatasetClass(node, explicit, local_class is not None, bases)
                    changed = True
        used = {
            cls.name for cls in (self.dataset_class_of(loader) for loader in self.loaders) if cls
        }
        datasets: dict[str, DatasetClass] = {}
        for dataset in found.values():
            # A class that merely looks like a container (a vocabulary, a cache) is a Dataset
            # only when the module hands it to a DataLoader.
            if dataset.explicit or dataset.name in used:
                datasets.setdefault(dataset.name, dataset)
        return datasets

    def class_of_instance(self, node: ast.AST | None, depth: int = 0) -> ast.ClassDef | None:
        """The class of this module whose instance ``node`` evaluates to, if a reader can tell."""
        if node is None or depth > 4:
            return None
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                binding = self.scopes.single_binding(node.func.id, node.func)
                if isinstance(binding, ast.ClassDef):
                    return binding
            return None
        if isinstance(node, ast.Name):
            binding = self.scopes.single_binding(node.id, node)
            if isinstance(binding, ast.expr):
                return self.class_of_instance(binding, depth + 1)
        return None

    def dataset_class_of(self, loader: LoaderCall) -> ast.ClassDef | None:
        return self.class_of_instance(loader.arguments.get("dataset"))

    def dataset_runs_in_workers(self, dataset: DatasetClass) -> bool:
        """False only when every DataLoader that could take this Dataset has num_workers=0."""
        own = [loader for loader in self.loaders if self.dataset_class_of(loader) is dataset.node]
        relevant = own or self.loaders
        if not relevant:
            return True
        return any(loader.workers is not Workers.ZERO for loader in relevant)


def _is_main_guard(test: ast.expr) -> bool:
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return False
    if not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [side for side in sides if isinstance(side, ast.Name) and side.id == "__name__"]
    constants = [
        side for side in sides if isinstance(side, ast.Constant) and side.value == "__main__"
    ]
    return len(names) == 1 and len(constants) == 1


@dataclass(frozen=True)
class Hit:
    """What a rule reports: the node to point at, the code, the message, an optional fix."""

    node: ast.AST
    code: str
    message: str
    fix: str | None = None


__all__ = [
    "UNKNOWN",
    "DatasetClass",
    "Hit",
    "LoaderCall",
    "ModuleModel",
    "Placement",
    "StartMethod",
    "Workers",
    "walk_local",
]
