"""A folder linted as one project: facts that cross module boundaries.

- a Dataset's base class imported from another module (``from .base import BaseDataset``,
  ``from datasets.base import BaseDataset``) is still a Dataset, and its methods count;
- a Dataset given only to DataLoaders with ``num_workers=0`` (anywhere in the project) is not
  judged for the pitfalls that need worker processes;
- ``cv2.setNumThreads(...)`` or ``set_start_method("fork")`` anywhere in the tree (a setup module,
  the entry point) holds for every module, since both are process-wide.

Modules that a cheap text scan found irrelevant are parsed only when a name resolves into them.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from loaderdoctor.lint.calls import CallGraph
from loaderdoctor.lint.model import (
    _FUNCTIONS,
    DatasetClass,
    FunctionNode,
    LoaderCall,
    ModuleModel,
    StartMethod,
)
from loaderdoctor.lint.scope import dotted_name

_DATASET_BASE_PREFIXES = ("torch.utils.data.", "torchvision.datasets.")
_UNBOUND_DATASET_SPELLINGS = frozenset(
    {"Dataset", "IterableDataset", "data.Dataset", "data.IterableDataset"}
)
_MAX_DEPTH = 4
PLATFORMS = ("all", "linux", "macos", "windows")


@dataclass
class PendingModule:
    """A module not parsed yet: its text, and how to turn it into a model when asked."""

    module_name: str
    load: Callable[[], ModuleModel | None]
    text: str = ""


class Project:
    """Every module of one lint run, and the facts that need more than one of them."""

    def __init__(
        self,
        modules: list[ModuleModel],
        pending: list[PendingModule] | None = None,
        platform: str = "all",
    ) -> None:
        self.modules = list(modules)
        self.platform = platform
        self._loaded: list[ModuleModel] = []  # modules parsed on demand, in that order
        # Answers a rule computes once per project: (the rule's question, id of the node) ->
        # answer (what a factory function's callers pass it, asked for each Dataset it builds).
        self.memo: dict[tuple[str, int], object] = {}
        self._indexed = 0  # how many of them the calls index holds
        self._by_name: dict[str, list[ModuleModel | PendingModule]] = {}
        for module in self.modules:
            self._adopt(module)
        for waiting in pending or []:
            self._index(waiting.module_name, waiting)
        _adopt_loader_subclasses(self)
        self.fork_everywhere = any(module.sets_fork for module in self.modules)
        self.sets_cv2_threads = any(_sets_cv2_threads(module) for module in self.modules)
        self._datasets: dict[int, DatasetClass] | None = None
        self._runs: dict[int, bool] = {}
        self._dataset_list: list[DatasetClass] | None = None
        self._loader_classes: list[tuple[LoaderCall, ModuleModel, ast.ClassDef | None]] | None = (
            None
        )
        self._calls_by_name: dict[str, list[tuple[ModuleModel, ast.Call]]] | None = None
        self.graph = CallGraph(self)

    # -- modules -----------------------------------------------------------------------------

    def _adopt(self, module: ModuleModel) -> None:
        self._index(module.module_name, module)

    def _index(self, name: str, entry: ModuleModel | PendingModule) -> None:
        parts = name.split(".") if name else []
        for start in range(len(parts)):
            self._by_name.setdefault(".".join(parts[start:]), []).append(entry)

    def find_module(
        self,
        importer: ModuleModel,
        dotted: str,
        level: int,
        hint: re.Pattern[str] | None = None,
    ) -> ModuleModel | None:
        """The project module that ``from <level dots><dotted> import ...`` in importer names.

        A module not parsed yet is parsed now, unless its text does not match ``hint``.
        """
        if level:
            package = importer.module_name.split(".") if importer.module_name else []
            if not importer.is_package:
                package = package[:-1]
            if level > 1:
                package = package[: len(package) - (level - 1)] if level - 1 <= len(package) else []
            dotted = ".".join([*package, *([dotted] if dotted else [])])
        candidates = self._by_name.get(dotted, [])
        parts = dotted.split(".")
        while not candidates and not level and len(parts) > 2:
            # `from pkg.utils.datasets import X` while the folder linted is pkg itself: its
            # modules are named from inside it (utils.datasets)
            parts = parts[1:]
            candidates = self._by_name.get(".".join(parts), [])
        if not candidates:
            return None
        if len(candidates) > 1:  # prefer the module nearest to the importer (a sibling script)
            here = importer.module_name.split(".")[:-1]
            candidates = sorted(
                candidates, key=lambda entry: -_common_prefix(here, entry.module_name.split("."))
            )
        entry = candidates[0]
        if isinstance(entry, PendingModule):
            if hint is not None and not hint.search(entry.text):
                return None
            return self._load(entry)
        return entry

    def _load(self, entry: PendingModule) -> ModuleModel | None:
        module = entry.load()
        if module is not None:
            self._loaded.append(module)
        for names in self._by_name.values():
            for index, other in enumerate(names):
                if other is entry:
                    if module is None:
                        names.pop(index)
                    else:
                        names[index] = module
                    break
        return module

    def _checked(self, module: ModuleModel) -> bool:
        return any(module is other for other in self.modules)

    # -- names -------------------------------------------------------------------------------

    def resolve(
        self,
        module: ModuleModel,
        node: ast.AST,
        depth: int = 0,
        hint: re.Pattern[str] | None = None,
    ) -> tuple[ModuleModel, ast.AST] | None:
        """The class or function definition a Name/Attribute refers to, in any project module."""
        dotted = dotted_name(node)
        if dotted is None or depth > _MAX_DEPTH:
            return None
        head, _, rest = dotted.partition(".")
        binding = module.scopes.single_binding(head, node)
        if isinstance(binding, (ast.ClassDef, *_FUNCTIONS)) and not rest:
            return module, binding
        source = module.scopes.import_sources.get(head)
        if source is None or not isinstance(binding, (ast.Import, ast.ImportFrom, type(None))):
            return None
        written, name, level = source
        if name is None:  # import pkg.mod as m; m.Class
            target_dotted, _, attribute = f"{written}.{rest}".rpartition(".")
            if not attribute or not target_dotted:
                return None
            target = self.find_module(module, target_dotted, 0, hint)
            return self._top_level(target, attribute, depth) if target else None
        target = self.find_module(module, written, level, hint)
        if target is None:
            submodule = self.find_module(
                module, f"{written}.{name}" if written else name, level, hint
            )
            if submodule is not None and rest and "." not in rest:
                return self._top_level(submodule, rest, depth)
            return None
        if rest:
            submodule = self.find_module(target, name, 1) if target.is_package else None
            if submodule is not None and "." not in rest:
                return self._top_level(submodule, rest, depth)
            return None
        return self._top_level(target, name, depth)

    def _top_level(
        self, module: ModuleModel, name: str, depth: int
    ) -> tuple[ModuleModel, ast.AST] | None:
        binding = module.scopes.bindings(module.tree).get(name)
        if not binding or len(binding) != 1:
            return None
        found = binding[0]
        if isinstance(found, (ast.ClassDef, *_FUNCTIONS)):
            return module, found
        if isinstance(found, (ast.Import, ast.ImportFrom)):  # re-exported by a package
            return self.resolve(module, ast.Name(id=name, ctx=ast.Load()), depth + 1)
        return None

    def values_of(
        self, module: ModuleModel, node: ast.Name, depth: int = 0
    ) -> list[tuple[ModuleModel, ast.AST]]:
        """What a name may hold where it is read, each with the module it is written in: the
        bindings that reach it in its own module (one ``if`` branch does not reach the other),
        else the top-level binding of the module it is imported from, by name or by a
        ``from package import *`` (through a package ``__init__`` that star-imports its own
        modules). Definitions are given as themselves, assignments as the assigned value."""
        found: list[tuple[ModuleModel, ast.AST]] = []
        bindings = module.scopes.reaching(node.id, node)
        for binding in bindings:
            if isinstance(binding, (ast.Import, ast.ImportFrom)):
                found.extend(self._imported_values(module, node.id, depth + 1))
            else:
                found.append((module, binding))
        if not bindings:
            found.extend(self._star_values(module, node.id, depth + 1))
        return found

    def _top_level_values(
        self, module: ModuleModel, name: str, depth: int
    ) -> list[tuple[ModuleModel, ast.AST]]:
        if depth > _MAX_DEPTH:
            return []
        bindings = module.scopes.bindings(module.tree).get(name)
        if not bindings:
            return self._star_values(module, name, depth + 1)
        found: list[tuple[ModuleModel, ast.AST]] = []
        for binding in bindings:
            if isinstance(binding, (ast.Import, ast.ImportFrom)):
                found.extend(self._imported_values(module, name, depth + 1))
            else:
                found.append((module, binding))
        return found

    def _imported_values(
        self, module: ModuleModel, name: str, depth: int
    ) -> list[tuple[ModuleModel, ast.AST]]:
        """What ``from x import name`` (as ``name``) in ``module`` brings: x's binding of it."""
        source = module.scopes.import_sources.get(name)
        if source is None or source[1] is None or depth > _MAX_DEPTH:
            return []
        target = self.find_module(module, source[0], source[2])
        if target is None or target is module:
            return []
        return self._top_level_values(target, source[1], depth + 1)

    def _star_values(
        self, module: ModuleModel, name: str, depth: int
    ) -> list[tuple[ModuleModel, ast.AST]]:
        if depth > _MAX_DEPTH:
            return []
        for written, level in module.scopes.star_imports:
            target = self.find_module(module, written, level)
            if target is not None and target is not module:
                found = self._top_level_values(target, name, depth + 1)
                if found:
                    return found
        return []

    def module_classes(
        self, module: ModuleModel, node: ast.AST
    ) -> list[tuple[ModuleModel, ast.ClassDef]]:
        """The classes a project module named by ``node`` defines or star-imports: what
        ``getattr(module, name)`` may give when ``name`` is only known at run time."""
        dotted = dotted_name(node)
        source = module.scopes.import_sources.get(dotted or "")
        if dotted is None or source is None:
            return []
        written, name, level = source
        target = self.find_module(module, f"{written}.{name}" if name else written, level)
        found: list[tuple[ModuleModel, ast.ClassDef]] = []
        seen: set[int] = set()
        pending = [target] if target is not None else []
        while pending and len(seen) < 8:
            current = pending.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            found.extend((current, c) for c in current.tree.body if isinstance(c, ast.ClassDef))
            for star, star_level in current.scopes.star_imports:
                starred = self.find_module(current, star, star_level)
                if starred is not None:
                    pending.append(starred)
        return found

    def class_of_instance(
        self, module: ModuleModel, node: ast.AST | None, depth: int = 0
    ) -> tuple[ModuleModel, ast.ClassDef] | None:
        """The project class whose instance ``node`` evaluates to, if a reader can tell."""
        if node is None or depth > _MAX_DEPTH:
            return None
        if isinstance(node, ast.Call):
            found = self.resolve(module, node.func)
            if found and isinstance(found[1], ast.ClassDef):
                return found[0], found[1]
            return None
        if isinstance(node, ast.Name):
            reaching = module.scopes.reaching(node.id, node)
            binding = reaching[0] if len(reaching) == 1 else None
            if isinstance(binding, ast.expr):
                return self.class_of_instance(module, binding, depth + 1)
        return None

    def classes_of_instance(
        self, module: ModuleModel, node: ast.AST | None
    ) -> list[tuple[ModuleModel, ast.ClassDef]]:
        """Every project class ``node`` may be an instance of: a name bound in each branch of
        an ``if``/``elif`` (``train_set = VOC(...)`` or ``COCO(...)``) may hold any of them."""
        if isinstance(node, ast.Name):
            bindings = module.scopes.reaching(node.id, node)
            if len(bindings) > 1:
                found = [self.class_of_instance(module, b) for b in bindings[:16]]
                unique = {id(f[1]): f for f in found if f is not None}
                return list(unique.values())
        single = self.class_of_instance(module, node)
        return [single] if single is not None else []

    def function(
        self, module: ModuleModel, node: ast.AST, hint: re.Pattern[str] | None = None
    ) -> tuple[ModuleModel, FunctionNode] | None:
        found = self.resolve(module, node, hint=hint)
        if found and isinstance(found[1], _FUNCTIONS):
            return found[0], found[1]
        return None

    def constructions(
        self, module: ModuleModel, cls: ast.ClassDef | FunctionNode
    ) -> list[tuple[ModuleModel, ast.Call]]:
        """Every call in a linted module that builds an instance of ``cls``, or calls the
        function ``cls`` (argument flow)."""
        if self._calls_by_name is None:
            self._calls_by_name = {}
            self._index_calls(self.modules)
        if self._indexed < len(self._loaded):  # a helper module parsed on demand builds it too
            self._index_calls(self._loaded[self._indexed :])
            self._indexed = len(self._loaded)
        found = []
        for model, call in self._calls_by_name.get(cls.name, ()):
            resolved = self.resolve(model, call.func)
            if resolved is not None and resolved[1] is cls:
                found.append((model, call))
        return found

    def _index_calls(self, modules: list[ModuleModel]) -> None:
        assert self._calls_by_name is not None
        for model in modules:
            for call in model.calls:
                func = call.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                self._calls_by_name.setdefault(name, []).append((model, call))

    # -- Dataset classes ---------------------------------------------------------------------

    @property
    def datasets(self) -> list[DatasetClass]:
        """Every Dataset class defined in a linted module, in module and source order."""
        if self._dataset_list is None:
            self._dataset_list = self._find_datasets()
        return self._dataset_list

    def _find_datasets(self) -> list[DatasetClass]:
        table = self._dataset_table()
        used = {id(cls) for _, _, cls in self._loaders_with_classes() if cls is not None}
        found = []
        for module in self.modules:
            for node in module.classes_in_order():
                dataset = table.get(id(node))
                # A class that merely looks like a container (a vocabulary, a cache) is a Dataset
                # only when some DataLoader of the project is given one.
                if dataset is not None and (dataset.explicit or id(node) in used):
                    found.append(dataset)
        return found

    def dataset_of(self, node: ast.ClassDef) -> DatasetClass | None:
        return self._dataset_table().get(id(node))

    def _dataset_table(self) -> dict[int, DatasetClass]:
        if self._datasets is not None:
            return self._datasets
        table: dict[int, DatasetClass] = {}
        self._datasets = table
        pending = [(module, node) for module in self.modules for node in module.classes_in_order()]
        # A class may derive from a Dataset defined further down, or in a module read later:
        # a class whose project base is not decided yet waits, so that a duck-typed subclass
        # (``__getitem__`` + ``__len__``) is not fixed without its bases; then the rest.
        for postpone in (True, False):
            changed = True
            while changed:
                changed = False
                for module, node in pending:
                    if id(node) in table:
                        continue
                    dataset = self._as_dataset(module, node, postpone=postpone)
                    if dataset is not None:
                        table[id(node)] = dataset
                        changed = True
        return table

    def _as_dataset(
        self, module: ModuleModel, node: ast.ClassDef, depth: int = 0, postpone: bool = False
    ) -> DatasetClass | None:
        table = self._datasets or {}
        explicit = False
        undecided = False
        bases: list[DatasetClass] = []
        for base in node.bases:
            name = module.scopes.qualified(base) or ""
            resolved = self.resolve(module, base)
            if resolved is not None and isinstance(resolved[1], ast.ClassDef):
                base_module, base_node = resolved[0], resolved[1]
                known = table.get(id(base_node))
                if base_node is node:
                    continue  # class Error(Error): the name of an imported class, shadowed
                if known is None and depth < _MAX_DEPTH and not self._checked(base_module):
                    # a module parsed on demand
                    known = self._as_dataset(base_module, base_node, depth + 1)
                    if known is not None:
                        table[id(base_node)] = known
                if known is not None:
                    explicit = explicit or known.explicit
                    bases.append(known)
                elif self._checked(base_module):
                    undecided = True
            elif name.startswith(_DATASET_BASE_PREFIXES) and name.endswith("Dataset"):
                explicit = True
            elif name.startswith("torchvision.datasets."):
                explicit = True
            elif name in _UNBOUND_DATASET_SPELLINGS and not module.scopes.is_imported(
                name.split(".")[0]
            ):
                explicit = True
        methods = {s.name for s in node.body if isinstance(s, _FUNCTIONS)}
        duck = {"__getitem__", "__len__"} <= methods
        if not (explicit or bases or duck):
            return None
        if postpone and undecided:
            return None  # decided once its project bases are
        local = module.scopes.enclosing(node, _FUNCTIONS) is not None
        return DatasetClass(node, module, explicit, local, bases)

    def _loaders_with_classes(self) -> list[tuple[LoaderCall, ModuleModel, ast.ClassDef | None]]:
        if self._loader_classes is None:
            found: list[tuple[LoaderCall, ModuleModel, ast.ClassDef | None]] = []
            for module in self.modules:
                for loader in module.loaders:
                    classes = self.classes_of_instance(module, loader.arguments.get("dataset"))
                    found.extend((loader, module, cls) for _, cls in classes)
                    if not classes:
                        found.append((loader, module, None))
            self._loader_classes = found
        return self._loader_classes

    def runs_in_workers(self, dataset: DatasetClass) -> bool:
        """False only when every DataLoader given this Dataset (or a subclass) has 0 workers."""
        known = self._runs.get(id(dataset))
        if known is None:
            known = self._runs[id(dataset)] = self._judge_workers(dataset)
        return known

    def _judge_workers(self, dataset: DatasetClass) -> bool:
        relevant = self.loaders_of(dataset)
        if not relevant:
            return True
        return any(loader.may_start_workers for loader in relevant)

    def loaders_of(self, dataset: DatasetClass) -> list[LoaderCall]:
        """The DataLoaders given this Dataset (or a subclass); every DataLoader of the project
        when none can be tied to it."""
        loaders = self._loaders_with_classes()
        family = {id(cls.node) for cls in self._dataset_table().values() if _derives(cls, dataset)}
        own = [loader for loader, _, cls in loaders if cls is not None and id(cls) in family]
        return own or [loader for loader, _, _ in loaders]

    def spawns(self, loader: LoaderCall) -> bool:
        """Whether this loader pickles what it hands to workers on some target platform."""
        if loader.start_method is StartMethod.SPAWN:
            return True
        # A context only known at run time (`sys.argv[1]`, a config value) may well be spawn, as
        # a num_workers from a config may well be > 0: judged like the default, not skipped.
        return (
            loader.start_method in (StartMethod.DEFAULT, StartMethod.UNKNOWN)
            and not self.fork_everywhere
        )

    def worker_datasets(self) -> Iterator[DatasetClass]:
        for dataset in self.datasets:
            if self.runs_in_workers(dataset):
                yield dataset


def _derives(cls: DatasetClass, ancestor: DatasetClass, depth: int = 0) -> bool:
    if cls is ancestor:
        return True
    return depth < 32 and any(_derives(base, ancestor, depth + 1) for base in cls.bases)


def _common_prefix(left: list[str], right: list[str]) -> int:
    count = 0
    for a, b in zip(left, right):
        if a != b:
            break
        count += 1
    return count


def _sets_cv2_threads(module: ModuleModel) -> bool:
    return any(module.scopes.qualified(call.func) == "cv2.setNumThreads" for call in module.calls)


def spawn_severity(project: Project, loader: LoaderCall) -> str:
    """How bad a spawn-only problem is for the target platform(s) of this lint run."""
    if loader.start_method is StartMethod.SPAWN:
        return "error"  # asked for spawn/forkserver explicitly: it fails everywhere
    return "warning" if project.platform == "linux" else "error"


def spawn_where(project: Project, loader: LoaderCall) -> str:
    """The platforms where a spawn-only problem bites, in words, for the message."""
    if loader.start_method is StartMethod.SPAWN:
        return "with its spawn/forkserver context"
    if project.platform == "linux":
        return "on Linux with Python 3.14+ (forkserver default) or a spawn context"
    if project.platform in ("windows", "macos"):
        return f"on {'Windows' if project.platform == 'windows' else 'macOS'} (spawn)"
    return "on Windows and macOS (spawn) and Linux from Python 3.14 (forkserver)"


def _adopt_loader_subclasses(project: Project) -> None:
    """``AudioDataLoader(dataset, num_workers=4)`` of a project ``class AudioDataLoader(DataLoader)``
    starts workers as a DataLoader does: its calls join their modules' loaders."""
    candidates = [
        (module, node)
        for module in project.modules
        for node in module.classes_in_order()
        if node.bases
    ]
    found: dict[int, ast.ClassDef] = {}
    changed = True
    while changed:  # a subclass of a subclass
        changed = False
        for module, node in candidates:
            if id(node) in found:
                continue
            for base in node.bases:
                resolved = project.resolve(module, base)
                if module._is_loader(base) or (resolved is not None and id(resolved[1]) in found):
                    found[id(node)] = node
                    changed = True
                    break
    if not found:
        return
    for module, node in candidates:
        if id(node) in found and not _passes_through(node):
            _adopt_own_init(module, node)
    names = {node.name for node in found.values()}
    for module in project.modules:
        known = {id(loader.node) for loader in module.loaders}
        for call in module.calls:
            func = call.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in names or id(call) in known:
                continue
            resolved = project.resolve(module, func)
            if resolved is None or id(resolved[1]) not in found:
                continue
            cls = resolved[1]
            assert isinstance(cls, ast.ClassDef)
            if _passes_through(cls) or "num_workers" in {k.arg for k in call.keywords}:
                module.loaders.append(module._loader(call))


def _adopt_own_init(module: ModuleModel, cls: ast.ClassDef) -> None:
    """``super().__init__(dataset, num_workers=4, collate_fn=lambda b: b)`` in a DataLoader
    subclass's own ``__init__`` builds the DataLoader: what it passes (a lambda collate_fn) is
    pickled into every worker as if the user had written it (ultralytics' InfiniteDataLoader
    shape; a lambda there is the spawn crash its Windows users report)."""
    known = {id(loader.node) for loader in module.loaders}
    for statement in cls.body:
        if not (isinstance(statement, _FUNCTIONS) and statement.name == "__init__"):
            continue
        for node in ast.walk(statement):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = node.func.value
            if node.func.attr != "__init__" or id(node) in known:
                continue
            if isinstance(receiver, ast.Call) and dotted_name(receiver.func) == "super":
                module.loaders.append(module._loader(node))


def _passes_through(cls: ast.ClassDef) -> bool:
    """No ``__init__`` of its own, or one taking ``(self, *args, **kwargs)``: DataLoader's
    parameters and defaults hold."""
    for statement in cls.body:
        if isinstance(statement, _FUNCTIONS) and statement.name == "__init__":
            arguments = statement.args
            return len(arguments.args) == 1 and arguments.vararg is not None
    return True
