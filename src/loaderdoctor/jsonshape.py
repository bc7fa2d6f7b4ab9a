"""Check that decoded JSON has the shape of a dataclass, before anything reads it.

Reports are read back from files a user can edit, copy or truncate (``loaderdoctor report``): a
field of the wrong type must be one line naming it (``report.incidents[0].evidence: expected a
list, got 3``), not an ``AttributeError`` deep in a renderer. The shape is the dataclass's own
annotations, so it cannot drift from the model.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, Literal, Union


class ShapeError(ValueError):
    """Decoded JSON that does not have the expected shape; the message names the field."""


def check_shape(value: object, hint: Any, where: str) -> None:
    """Raise :class:`ShapeError` unless ``value`` (decoded JSON) can be read as ``hint``.

    ``hint`` is a dataclass (its fields with defaults may be absent, unknown keys are ignored;
    one whose ``JSON_FORM`` names a ``TypedDict`` is checked against that), a ``TypedDict``,
    or ``list[...]``, ``tuple[...]`` (a JSON array), ``dict[str, ...]``, a union, a ``Literal``,
    ``int``, ``float`` (an integer will do), ``str``, ``bool``, ``None`` or ``Any``.
    """
    if hint is Any or hint is object:
        return
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        present = [option for option in args if option is not type(None)]
        if value is not None and len(present) == 1:  # X | None: say what is wrong with the X
            check_shape(value, present[0], where)
            return
        for option in args:
            try:
                check_shape(value, option, where)
            except ShapeError:
                continue
            return
        raise _error(where, " or ".join(_describe(option) for option in args), value)
    if origin is Literal:
        if value not in args or isinstance(value, bool) != isinstance(args[0], bool):
            raise _error(where, " or ".join(json.dumps(option) for option in args), value)
        return
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise _error(where, "a list", value)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise _error(where, f"a list of {len(args)}", value)
            for position, (item, item_hint) in enumerate(zip(value, args)):
                check_shape(item, item_hint, f"{where}[{position}]")
            return
        for position, item in enumerate(value):
            check_shape(item, args[0] if args else Any, f"{where}[{position}]")
        return
    if origin is dict:
        if not isinstance(value, dict):
            raise _error(where, "an object", value)
        for key, item in value.items():
            check_shape(item, args[1] if args else Any, f"{where}.{key}")
        return
    if isinstance(hint, type) and isinstance(form := getattr(hint, "JSON_FORM", None), type):
        hint = form  # a type whose JSON form is not its fields (a flat view of a nested one)
    if typing.is_typeddict(hint):
        _check_typeddict(value, hint, where)
        return
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        _check_dataclass(value, hint, where)
        return
    if not _is_instance(value, hint):
        raise _error(where, _describe(hint), value)


def _check_dataclass(value: object, cls: type, where: str) -> None:
    if not isinstance(value, dict):
        raise _error(where, "an object", value)
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if field.name in value:
            check_shape(value[field.name], hints[field.name], f"{where}.{field.name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ShapeError(f"{where}: no {field.name!r}")


def _check_typeddict(value: object, cls: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise _error(where, "an object", value)
    hints = typing.get_type_hints(cls)
    for name, hint in hints.items():
        if name in value:
            check_shape(value[name], hint, f"{where}.{name}")
        elif name in cls.__required_keys__:
            raise ShapeError(f"{where}: no {name!r}")


def _is_instance(value: object, hint: Any) -> bool:
    if hint is None or hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(hint, type) and isinstance(value, hint)


def _describe(hint: Any) -> str:
    names = {int: "an integer", float: "a number", str: "text", bool: "true or false"}
    if hint is None or hint is type(None):
        return "null"
    origin = typing.get_origin(hint)
    if origin in (list, tuple):
        return "a list"
    if origin is dict or dataclasses.is_dataclass(hint):
        return "an object"
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def json_kind(value: object) -> str:
    """``a list``, ``null``, ``text``...: what a JSON value is, in the user's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    kinds = {dict: "an object", list: "a list", str: "text", int: "a number", float: "a number"}
    return kinds.get(type(value), type(value).__name__)


def _error(where: str, expected: str, value: object) -> ShapeError:
    text = json.dumps(value, default=repr)
    if len(text) > 40:
        text = text[:37] + "..."
    return ShapeError(f"{where}: expected {expected}, got {text}")
