"""Silent data bugs in the source: the static forms of what ``loaderdoctor run`` finds at run time.

LD111: a ``DistributedSampler`` (shuffling) whose loader is iterated in an epoch loop, with no
``set_epoch`` call anywhere in the project: every epoch repeats the first one's order.
LD112: an ``IterableDataset`` whose stream is never split by ``get_worker_info()``, given to a
loader with workers: every worker yields the whole stream.
LD113: a dataset attribute assigned in the training loop of a loader with
``persistent_workers=True``: the workers keep the value they started with.

Each stays silent where a reader could not tell: a sampler handed to a framework (which calls
``set_epoch`` itself), a stream that draws random items (each worker's generator is seeded apart)
or is configured per worker in ``worker_init_fn``, a value read through a shared object.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from loaderdoctor.lint.model import DatasetClass, Hit, LoaderCall, ModuleModel
from loaderdoctor.lint.project import Project

_DISTRIBUTED_SAMPLERS = frozenset(
    {
        "torch.utils.data.distributed.DistributedSampler",
        "torch.utils.data.DistributedSampler",
        "DistributedSampler",
    }
)
_ITERABLE_BASES = ("torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset")
# What a stream that shares its items out between workers mentions (torch's API, webdataset's
# and Hugging Face datasets' splitters, a worker_info handed in)
_SHARDING_WORDS = ("get_worker_info", "worker_info", "split_by_worker", "split_dataset_by_node")
# A stream that draws random items yields different ones in each worker (torch seeds them apart)
_RANDOM_PREFIXES = ("torch.rand", "numpy.random.", "random.", "torch.normal", "torch.bernoulli")


def _loops(tree: ast.AST) -> Iterator[ast.For | ast.AsyncFor | ast.While]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            yield node


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _bound_name(model: ModuleModel, call: ast.AST) -> str | None:
    """``loader`` in ``loader = DataLoader(...)``."""
    for node in ast.walk(model.tree):
        if isinstance(node, ast.Assign) and node.value is call and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                return target.id
    return None


def _iterated_in_epoch_loop(model: ModuleModel, loader_name: str) -> ast.For | ast.AsyncFor | None:
    """An inner ``for ... in loader`` (or ``enumerate(loader)``, ``tqdm(loader)``) inside an
    outer loop: an epoch loop the user wrote, not a framework's."""
    for outer in _loops(model.tree):
        for inner in ast.walk(outer):
            if inner is outer or not isinstance(inner, (ast.For, ast.AsyncFor)):
                continue
            if loader_name in _names(inner.iter):
                return inner
    return None


def check_distributed_without_set_epoch(project: Project) -> Iterator[Hit]:
    if any(
        isinstance(call.func, ast.Attribute) and call.func.attr == "set_epoch"
        for model in project.modules
        for call in model.calls
    ):
        return  # called somewhere: on this sampler, through the loader, or by a helper
    for model in project.modules:
        for loader in model.loaders:
            sampler = _distributed_sampler(model, loader.arguments.get("sampler"))
            loader_name = _bound_name(model, loader.node)
            if sampler is None or loader_name is None:
                continue
            loop = _iterated_in_epoch_loop(model, loader_name)
            if loop is None:
                continue
            yield Hit(
                model,
                sampler,
                "LD111",
                f"`{model.segment(sampler.func)}(...)` shuffles, and `{loader_name}` is iterated "
                f"in an epoch loop (line {loop.lineno}) with no `set_epoch` call: every epoch "
                "(on every rank) draws the same order",
            )


def _distributed_sampler(model: ModuleModel, node: ast.expr | None) -> ast.Call | None:
    """The shuffling ``DistributedSampler(...)`` call a ``sampler=`` argument is, if it is one."""
    if isinstance(node, ast.Name):
        binding = model.scopes.single_binding(node.id, node)
        node = binding if isinstance(binding, ast.Call) else None
    if not isinstance(node, ast.Call):
        return None
    if (model.scopes.qualified(node.func) or "") not in _DISTRIBUTED_SAMPLERS:
        return None
    for keyword in node.keywords:
        if keyword.arg == "shuffle" and not (
            isinstance(keyword.value, ast.Constant) and keyword.value.value is True
        ):
            return None  # shuffle=False, or a value only known at run time
    return node


# --- LD112 ---------------------------------------------------------------------------------
def _is_iterable(project: Project, dataset: DatasetClass, depth: int = 0) -> bool:
    model = dataset.module
    for base in dataset.node.bases:
        if (model.scopes.qualified(base) or "") in _ITERABLE_BASES:
            return True
    return depth < 8 and any(_is_iterable(project, base, depth + 1) for base in dataset.bases)


def _shares_out(dataset: DatasetClass, depth: int = 0) -> bool:
    """Whether the class (or a base) mentions a worker splitter, or draws random items."""
    model = dataset.module
    text = model.segment(dataset.node)
    if any(word in text for word in _SHARDING_WORDS):
        return True
    for node in ast.walk(dataset.node):
        if isinstance(node, ast.Call):
            name = model.scopes.qualified(node.func) or ""
            if name.startswith(_RANDOM_PREFIXES):
                return True
    return depth < 8 and any(_shares_out(base, depth + 1) for base in dataset.bases)


def check_unsplit_streams(project: Project) -> Iterator[Hit]:
    seen: set[int] = set()
    for model in project.modules:
        for loader in model.loaders:
            if not _with_workers(loader) or "worker_init_fn" in loader.arguments:
                continue
            for _, cls in project.classes_of_instance(model, loader.arguments.get("dataset")):
                dataset = project.dataset_of(cls)
                if dataset is None or id(cls) in seen or dataset.method("__iter__") is None:
                    continue
                if not _is_iterable(project, dataset) or _shares_out(dataset):
                    continue
                seen.add(id(cls))
                iterate = dataset.method("__iter__")
                assert iterate is not None
                yield Hit(
                    dataset.module,
                    iterate,
                    "LD112",
                    f"`{cls.name}.__iter__` never asks `get_worker_info()`, and `{cls.name}` is "
                    f"given to a DataLoader with num_workers={loader.workers_text} (line "
                    f"{loader.node.lineno}): every worker yields the whole stream, so each item "
                    "arrives once per worker",
                )


def _with_workers(loader: LoaderCall) -> bool:
    return loader.may_start_workers and not loader.zero_by_default


# --- LD113 ---------------------------------------------------------------------------------
def _persistent(loader: LoaderCall) -> bool:
    value = loader.arguments.get("persistent_workers")
    return isinstance(value, ast.Constant) and value.value is True


def check_stale_persistent_attributes(project: Project) -> Iterator[Hit]:
    for model in project.modules:
        for loader in model.loaders:
            dataset = loader.arguments.get("dataset")
            loader_name = _bound_name(model, loader.node)
            if not _persistent(loader) or loader_name is None:
                continue
            dataset_name = dataset.id if isinstance(dataset, ast.Name) else None
            for loop in _loops(model.tree):
                if not any(
                    isinstance(inner, (ast.For, ast.AsyncFor)) and loader_name in _names(inner.iter)
                    for inner in ast.walk(loop)
                ):
                    continue
                for node in ast.walk(loop):
                    if not isinstance(node, (ast.Assign, ast.AugAssign)):
                        continue
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        held = _dataset_attribute(target, dataset_name, loader_name)
                        if held is None:
                            continue
                        yield Hit(
                            model,
                            node,
                            "LD113",
                            f"`{model.segment(target)}` is assigned in the loop that iterates "
                            f"`{loader_name}`, whose persistent_workers=True workers keep the "
                            f"copy of `{held}` they started with: they never see the new value",
                        )
                break  # the outermost loop that iterates the loader holds the others


def _dataset_attribute(target: ast.expr, dataset_name: str | None, loader_name: str) -> str | None:
    """``dataset`` for ``dataset.size = ...`` or ``loader.dataset.size = ...``."""
    if not isinstance(target, ast.Attribute):
        return None
    owner = target.value
    if isinstance(owner, ast.Name) and owner.id == dataset_name:
        return dataset_name
    if (
        isinstance(owner, ast.Attribute)
        and owner.attr == "dataset"
        and isinstance(owner.value, ast.Name)
        and owner.value.id == loader_name
    ):
        return f"{loader_name}.dataset"
    return None


__all__ = [
    "check_distributed_without_set_epoch",
    "check_stale_persistent_attributes",
    "check_unsplit_streams",
]
