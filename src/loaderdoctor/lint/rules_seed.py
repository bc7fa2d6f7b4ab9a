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

from loaderdoctor.lint.model import Hit, ModuleModel
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
                f"`{model.segment(call.func)}(...)` seeds from `np.random.get_state()[1][0]`, which is 2147483648 in every worker "
                "once torch has seeded numpy from an array: the seed is the same every epoch "
                "and every run, so the random augmentations repeat",
            )


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
