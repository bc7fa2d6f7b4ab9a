"""The facts every rule needs, computed once per module: DataLoader calls, classes, placement.

Facts that need more than one module (a Dataset's base class in another file, the
``num_workers`` of every DataLoader a Dataset is given to, ``cv2.setNumThreads`` in a setup
module) live in :mod:`loaderdoctor.lint.project`.
"""

from __future__ import annotations

import ast
import enum
from dataclasses import dataclass, field

from loaderdoctor import torch_signature
from loaderdoctor.lint.scope import UNKNOWN, Scopes, dotted_name, is_positive, walk_local

# DataLoader's positional parameters, in order (torch.utils.data.DataLoader.__init__).
LOADER_PARAMS = torch_signature.POSITIONAL
_DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
_UNBOUND_LOADER_SPELLINGS = frozenset(
    {"DataLoader", "data.DataLoader", "torch.utils.data.DataLoader"}
)
# Methods that run in the workers, and the ones the rules start from.
WORKER_ENTRY_METHODS = ("__getitem__", "__getitems__", "__iter__")
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# Names a reader takes for a configuration object (``cfg.DATALOADER.NUM_WORKERS``).
_CONFIG_HINTS = ("cfg", "conf", "config", "hparams", "hp", "params", "settings", "opt", "args")


class Workers(enum.Enum):
    ZERO = "zero"  # known to be 0 (or not given): no worker processes
    POSITIVE = "positive"  # known to be at least 1
    MAYBE = "maybe"  # from a config, the command line, **kwargs or a parameter: possibly > 0


class StartMethod(enum.Enum):
    FORK = "fork"
    SPAWN = "spawn"  # spawn or forkserver, asked for explicitly: everything is pickled
    DEFAULT = "default"  # the platform's default: spawn on Windows/macOS, fork on Linux <3.14
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
    zero_by_default: bool = False  # a command-line flag whose default is 0

    @property
    def may_start_workers(self) -> bool:
        return self.workers is not Workers.ZERO


@dataclass(eq=False)
class DatasetClass:
    """A Dataset class of the project, with its base classes resolved across modules."""

    node: ast.ClassDef
    module: ModuleModel
    explicit: bool  # derives from a Dataset; otherwise only duck-typed (__getitem__ + __len__)
    local: bool  # defined inside a function: cannot be pickled
    bases: list[DatasetClass] = field(default_factory=list)
    _worker_methods: list[tuple[FunctionNode, DatasetClass]] | None = field(
        default=None, repr=False
    )
    _init_methods: list[tuple[FunctionNode, DatasetClass]] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.node.name

    def find(self, name: str, depth: int = 0) -> tuple[FunctionNode, DatasetClass] | None:
        """The method ``name`` and the class that defines it (this one or a base)."""
        for statement in self.node.body:
            if isinstance(statement, _FUNCTIONS) and statement.name == name:
                return statement, self
        if depth > 32:  # a cycle of bases that a reader could not untangle either
            return None
        for base in self.bases:
            found = base.find(name, depth + 1)
            if found is not None:
                return found
        return None

    def method(self, name: str) -> FunctionNode | None:
        found = self.find(name)
        return found[0] if found else None

    def _find_in_bases(self, name: str) -> tuple[FunctionNode, DatasetClass] | None:
        for base in self.bases:
            found = base.find(name)
            if found is not None:
                return found
        return None

    def _closure(
        self, start: list[str], stop: tuple[str, ...]
    ) -> list[tuple[FunctionNode, DatasetClass]]:
        """Methods reached from ``start`` through ``self.m()`` and ``super().m()`` calls."""
        pending: list[tuple[FunctionNode, DatasetClass]] = []
        for name in start:
            found = self.find(name)
            if found is not None:
                pending.append(found)
        seen: set[int] = set()
        result: list[tuple[FunctionNode, DatasetClass]] = []
        while pending:
            method, owner = pending.pop()
            if id(method) in seen:
                continue
            seen.add(id(method))
            result.append((method, owner))
            for node in walk_local(method):
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                    continue
                name = node.func.attr
                receiver = node.func.value
                found = None
                if isinstance(receiver, ast.Name) and receiver.id == "self":
                    if name not in stop:
                        found = self.find(name)  # dispatch from the most derived class
                elif _is_super(receiver, owner):
                    found = owner._find_in_bases(name)  # super().__init__(...)
                if found is not None:
                    pending.append(found)
        return result

    def worker_methods(self) -> list[tuple[FunctionNode, DatasetClass]]:
        """The methods that run in workers: entry points and what they call on ``self``."""
        if self._worker_methods is None:
            entries = [name for name in WORKER_ENTRY_METHODS if self.find(name) is not None]
            self._worker_methods = self._closure(entries, ("__init__",))
        return self._worker_methods

    def init_methods(self) -> list[tuple[FunctionNode, DatasetClass]]:
        """``__init__`` and the helpers it calls on ``self`` (``self._load_annotations()``)."""
        if self._init_methods is None:
            found = self.find("__init__") is not None
            self._init_methods = self._closure(["__init__"], WORKER_ENTRY_METHODS) if found else []
        return self._init_methods


class ModuleModel:
    """A parsed module and the facts the rules share."""

    def __init__(
        self,
        tree: ast.Module,
        source: str,
        notebook: bool = False,
        path: str = "<string>",
        module_name: str = "",
    ) -> None:
        self.tree = tree
        self.source = source
        self.notebook = notebook
        self.path = path
        self.module_name = module_name  # dotted, relative to the folder that was linted
        self.is_package = path.endswith("__init__.py")
        self.scopes = Scopes(tree)
        self.classes: dict[str, ast.ClassDef] = {}
        self.calls: list[ast.Call] = []
        self._lines = source.splitlines(keepends=True)
        self.lines = source.splitlines()
        for node in self.scopes.nodes:
            if isinstance(node, ast.ClassDef):
                self.classes.setdefault(node.name, node)
            elif isinstance(node, ast.Call):
                self.calls.append(node)
        self.sets_fork = self._sets_fork_start_method()
        self.loaders = [self._loader(call) for call in self.calls if self._is_loader(call.func)]

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
        unpacked: list[ast.expr] = []
        for position, argument in enumerate(call.args):
            if isinstance(argument, ast.Starred):
                unpacked.append(argument.value)
                break
            if position < len(LOADER_PARAMS):
                arguments[LOADER_PARAMS[position]] = argument
        for keyword in call.keywords:
            if keyword.arg is None:
                unpacked.append(keyword.value)
            else:
                arguments[keyword.arg] = keyword.value
                keywords[keyword.arg] = keyword
        workers_node = arguments.get("num_workers")
        if workers_node is None:
            workers_node = self._from_unpacked(unpacked, "num_workers")
        if workers_node is None:
            if unpacked and not all(self._known_keys(node) for node in unpacked):
                text = self.segment(unpacked[0]) or "kwargs"
                workers, workers_text = Workers.MAYBE, f"? (`**{text}` may set it: possibly > 0)"
            else:
                workers, workers_text = Workers.ZERO, "0 (the default)"
        else:
            workers, workers_text = self._workers_given(workers_node)
        context = arguments.get("multiprocessing_context")
        zero_by_default = (
            workers_node is not None
            and workers is Workers.MAYBE
            and self.scopes.evaluate(workers_node) == 0
        )
        if zero_by_default and workers_node is not None:
            workers_text = f"{self.segment(workers_node)} (0 by default, set on the command line)"
        return LoaderCall(
            zero_by_default=zero_by_default,
            node=call,
            arguments=arguments,
            keywords=keywords,
            has_unpacking=bool(unpacked),
            workers=workers,
            workers_text=workers_text,
            start_method=self._start_method(context),
        )

    def _from_unpacked(self, unpacked: list[ast.expr], name: str) -> ast.expr | None:
        """``num_workers`` from ``**dict(num_workers=4)`` or ``**{"num_workers": 4}``."""
        for node in unpacked:
            value: ast.AST | None = node
            if isinstance(node, ast.Name):
                value = self.scopes.single_binding(node.id, node)
            if isinstance(value, ast.Dict):
                for key, item in zip(value.keys, value.values):
                    if isinstance(key, ast.Constant) and key.value == name:
                        return item
            elif isinstance(value, ast.Call) and dotted_name(value.func) == "dict":
                for keyword in value.keywords:
                    if keyword.arg == name:
                        return keyword.value
        return None

    def _known_keys(self, node: ast.expr) -> bool:
        """Whether every key of an unpacked ``**mapping`` is written out (a dict display)."""
        value: ast.AST | None = node
        if isinstance(node, ast.Name):
            value = self.scopes.single_binding(node.id, node)
        if isinstance(value, ast.Dict):
            return all(isinstance(key, ast.Constant) for key in value.keys)
        if isinstance(value, ast.Call) and dotted_name(value.func) == "dict":
            return not value.args and all(k.arg is not None for k in value.keywords)
        return False

    def _workers_given(self, node: ast.expr) -> tuple[Workers, str]:
        value = self.scopes.evaluate(node)
        text = self.segment(node) or "?"
        if is_positive(value):
            if type(value) is int and text != str(value):
                text = f"{text} (= {value})"
            return Workers.POSITIVE, text
        if value == 0 and type(value) is int and not self._configurable(node):
            return Workers.ZERO, text if text == "0" else f"{text} (= 0)"
        return Workers.MAYBE, f"{text} ({self._origin(node)}: possibly > 0)"

    def _configurable(self, node: ast.expr) -> bool:
        """A value the user sets at run time (a command-line flag), even if it defaults to 0."""
        return isinstance(node, ast.Attribute) and self._origin(node) == "from the command line"

    def _origin(self, node: ast.expr) -> str:
        """Where a value a reader cannot know comes from, in words."""
        root: ast.AST = node
        while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
            if isinstance(root, ast.Call):
                if not isinstance(root.func, ast.Attribute):
                    break
                root = root.func.value  # kwargs.get("num_workers", 0)
            else:
                root = root.value
        if isinstance(root, ast.Name):
            name = root.id
            parts = (dotted_name(node) or self.segment(node)).lower().replace("[", ".").split(".")
            if name in self.scopes.arg_holders and isinstance(node, ast.Attribute):
                return "from the command line"
            if any(hint in part for part in parts for hint in _CONFIG_HINTS):
                return "from a config"
            if "kwargs" in name:
                return "from **kwargs"
            if name == "self":
                return "an attribute set elsewhere"
            binding = self.scopes.lookup(name, root)
            if binding and all(isinstance(b, ast.arguments) for b in binding):
                function = self.scopes.scope_of(root)
                owner = getattr(function, "name", "the function")
                return f"a parameter of `{owner}()`"
        return "not known statically"

    def _start_method(self, context: ast.expr | None) -> StartMethod:
        if context is None or (isinstance(context, ast.Constant) and context.value is None):
            return StartMethod.DEFAULT
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
            if isinstance(parent, ast.If) and is_main_guard(parent.test):
                if any(child is statement for statement in parent.body):
                    return Placement.GUARDED
            child, parent = parent, self.scopes.parents.get(parent)
        return Placement.UNGUARDED


def _is_super(node: ast.expr, owner: DatasetClass) -> bool:
    """``super()``, ``super(Cls, self)``, or ``Base`` in ``Base.__init__(self, ...)``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id == "super"
    if isinstance(node, ast.Name):
        return any(base.name == node.id for base in owner.bases)
    return False


def is_main_guard(test: ast.expr) -> bool:
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
    """What a rule reports: where (module and node), the code, the message, optional overrides.

    ``severity`` overrides the rule's default (``info`` for a list of file names that LD107
    only mentions); ``fix`` overrides the catalog's fix text with one for this finding.
    """

    module: ModuleModel
    node: ast.AST
    code: str
    message: str
    fix: str | None = None
    severity: str | None = None


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
