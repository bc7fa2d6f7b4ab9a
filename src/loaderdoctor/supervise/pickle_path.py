"""Where inside an object the part that cannot be pickled lies (``dataset.transform.transforms[0]``).

Pickle's own error names the offending object's type (``cannot pickle 'generator' object``) or a
function (``Can't pickle <function <lambda>>``), never where it sits: a lambda three attributes
deep in a Dataset reads as "dataset". Used by the parent on what spawn must send, and by a worker
on a batch its queue could not send.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any

# A walk only descends where pickling failed, but each level tries every child once: a Dataset
# holding a million-entry list must not cost a million pickles.
MAX_CHILDREN = 256
MAX_DEPTH = 12
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _children(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        items: Iterator[tuple[str, Any]] = (
            (f"{path}[{key!r}]", child) for key, child in value.items()
        )
    elif isinstance(value, (list, tuple)):
        items = ((f"{path}[{i}]", child) for i, child in enumerate(value))
    elif isinstance(value, _OPAQUE) or not hasattr(value, "__dict__"):
        return
    else:
        items = ((f"{path}.{name}", child) for name, child in vars(value).items())
    for count, item in enumerate(items):
        if count >= MAX_CHILDREN:
            return
        yield item


def describe_type(value: Any) -> str:
    """``lambda``, ``function 'make.<locals>.f'``, ``generator``: how a user recognises it."""
    if isinstance(value, types.FunctionType):
        return "lambda" if value.__name__ == "<lambda>" else f"function {value.__qualname__!r}"
    return type(value).__name__


def unpicklable_path(value: Any, root: str, dumps: Callable[[Any], Any]) -> tuple[str, str]:
    """The path from ``root`` to the innermost object ``dumps`` refuses, and its type
    (``describe_type``); ``(root, type)`` when no part of it fails alone."""
    path, current = root, value
    for _ in range(MAX_DEPTH):
        for child_path, child in _children(current, path):
            try:
                dumps(child)
            except Exception:  # pickle raises anything a __reduce__ raises
                path, current = child_path, child
                break
        else:
            break
    return path, describe_type(current)


__all__ = ["describe_type", "unpicklable_path"]
