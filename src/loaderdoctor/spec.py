"""Load the user's dataset from a spec: ``path/to/file.py:NAME`` or ``package.module:NAME``.

``NAME`` is a Dataset object (or DataLoader) or a zero-argument callable returning one. Every way
this can fail is a ``SpecError`` with one line that says what to fix; ``env``, ``scan`` and
``tune`` share it.
"""

from __future__ import annotations

import importlib
import importlib.util
import operator
import os
import sys
import traceback
from types import ModuleType, TracebackType


class SpecError(Exception):
    """A dataset spec that does not load; the message is one line meant for the user."""


def load_dataset(spec: str) -> object:
    location, name, value = _resolve(spec, "dataset")
    if not _is_dataset_like(value) and callable(value):
        value = _call_factory(value, location, name)
    if not _is_dataset_like(value):
        raise SpecError(
            f"{location}:{name} is a {type(value).__name__}, not a dataset: it needs "
            "__getitem__ and __len__ (map-style) or __iter__ (iterable-style)"
        )
    return value


def dataset_length(dataset: object, spec: str) -> int:
    """``len(dataset)``, or :class:`SpecError` when its ``__len__`` raises or returns what no
    length is (a negative number, ``10.5``): the user's dataset is wrong, not loaderdoctor.

    ``__len__`` is called directly, not through ``len()``: ``len()`` turns a float into a
    ``TypeError`` and a negative into a ``ValueError`` that no longer say which value it was.
    """
    method = getattr(type(dataset), "__len__", None)
    if method is None:
        raise SpecError(f"{spec} has no __len__: a map-style dataset needs one")
    try:
        value = method(dataset)
    except Exception as error:  # whatever the user's __len__ raises is the user's to fix
        raise SpecError(
            f"{spec}: its __len__ raised {_describe(error)}{_where(error.__traceback__)}"
        ) from None
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise SpecError(
            f"{spec}: its __len__ returned {value!r:.60} (a {type(value).__name__}), not a whole "
            "number of samples"
        )
    length = operator.index(value)
    if length < 0:
        raise SpecError(f"{spec}: its __len__ returned {length}; a length is 0 or more")
    return length


def _call_factory(factory: object, location: str, name: str) -> object:
    """``NAME()``, seen as a function returning the dataset: with ``sys.argv`` holding only the
    script (not loaderdoctor's options), and should it exit instead (``train.py:main`` parsing
    its command line with argparse), what it printed is kept back and the exit is a SpecError."""
    import contextlib
    import io

    assert callable(factory)
    printed = io.StringIO()
    argv = sys.argv
    sys.argv = [location]
    try:
        with contextlib.redirect_stderr(printed):
            value = factory()
    except SystemExit as stop:
        raise SpecError(
            f"{location}:{name}() exited (SystemExit: {stop.code}) instead of returning a "
            "dataset: name a Dataset or DataLoader object, or a function that builds one "
            "without arguments (not the script's main)"
        ) from None
    except Exception as error:  # the user's factory raises anything
        raise SpecError(
            f"{location}:{name}() raised {_describe(error)}{_where(error.__traceback__)}"
        ) from None
    finally:
        sys.argv = argv
    sys.stderr.write(printed.getvalue())  # it returned: what it said is the user's to see
    return value


def load_object(spec: str, what: str = "object") -> object:
    """``NAME`` in ``path/to/file.py:NAME`` or ``package.module:NAME`` as it is (a collate_fn)."""
    return _resolve(spec, what)[2]


def _resolve(spec: str, what: str) -> tuple[str, str, object]:
    location, separator, name = spec.rpartition(":")
    if not separator or not location or not name:
        raise SpecError(
            f"{what} spec {spec!r} has no ':NAME'; expected path/to/file.py:NAME "
            "or package.module:NAME"
        )
    is_file = location.endswith(".py") or os.sep in location or "/" in location
    module = _import_file(location) if is_file else _import_module(location)
    if not hasattr(module, name):
        names = _candidates(module)
        hint = f" (it has: {', '.join(names[:8])}{', ...' if len(names) > 8 else ''})"
        raise SpecError(f"{location} has no name {name!r}{hint if names else ''}")
    return location, name, getattr(module, name)


def _candidates(module: ModuleType) -> list[str]:
    """The names a spec could mean: datasets and loaders first, then the module's own functions
    and classes; never what it imported (``torch``, ``Dataset``, ``Image``)."""

    data = sys.modules.get("torch.utils.data")
    kinds = (data.Dataset, data.DataLoader) if data is not None else ()

    def own(value: object) -> bool:
        if isinstance(value, ModuleType):
            return False
        if kinds and isinstance(value, kinds):
            return True
        if isinstance(value, type) or callable(value):
            return getattr(value, "__module__", None) == module.__name__
        return True

    def rank(item: tuple[str, object]) -> tuple[int, str]:
        name, value = item
        if kinds and isinstance(value, kinds):
            return 0, name
        if kinds and isinstance(value, type) and issubclass(value, kinds):
            return 1, name
        return 2, name

    public = [(n, v) for n, v in vars(module).items() if not n.startswith("_") and own(v)]
    return [name for name, _ in sorted(public, key=rank)]


def _is_dataset_like(value: object) -> bool:
    if isinstance(value, type):
        return False  # a Dataset class is a factory, not a dataset
    map_style = hasattr(value, "__getitem__") and hasattr(value, "__len__")
    return map_style or hasattr(value, "__iter__")


def _import_file(path: str) -> ModuleType:
    if not os.path.isfile(path):
        if os.path.exists(path):  # a FIFO would block the import for ever
            raise SpecError(f"{path} is not a regular file: a dataset spec names a Python file")
        raise SpecError(f"no such file: {path}")
    absolute = os.path.abspath(path)
    stem = os.path.splitext(os.path.basename(absolute))[0]
    # Register under the file's own name when free, as ``python file.py`` would make it
    # importable, so that pickling its classes (spawn, forkserver) finds them.
    module_name = stem if stem.isidentifier() and stem not in sys.modules else f"_ld_spec_{stem}"
    module_spec = importlib.util.spec_from_file_location(module_name, absolute)
    if module_spec is None or module_spec.loader is None:
        raise SpecError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(module_spec)
    directory = os.path.dirname(absolute)
    if directory not in sys.path:
        sys.path.insert(0, directory)  # sibling imports, as when running the file
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException as error:  # the user's module may even sys.exit() at import
        sys.modules.pop(module_name, None)
        if not isinstance(error, Exception):
            raise  # KeyboardInterrupt, SystemExit... are not ours to swallow
        raise SpecError(
            f"importing {path} failed: {_describe(error)}{_where_in(error, absolute)}"
        ) from None
    return module


def _import_module(name: str) -> ModuleType:
    # `dataset:train` where `python -c "import dataset"` works: the current folder, which the
    # console script (unlike python -m and -c) leaves off sys.path.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and (name == error.name or name.startswith(error.name + ".")):
            raise SpecError(
                f"no module named {error.name!r} (is it installed, or on PYTHONPATH?)"
            ) from None
        raise SpecError(
            f"importing {name} failed: {_describe(error)}{_where(error.__traceback__)}"
        ) from None
    except Exception as error:  # the user's module raises anything at import
        raise SpecError(
            f"importing {name} failed: {_describe(error)}{_where(error.__traceback__)}"
        ) from None


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _where_in(error: BaseException, path: str) -> str:
    if isinstance(error, SyntaxError) and error.lineno is not None:
        return f" ({os.path.basename(error.filename or path)}, line {error.lineno})"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == path]
    if frames:
        return f" ({os.path.basename(path)}, line {frames[-1].lineno})"
    return _where(error.__traceback__)


def _where(trace: TracebackType | None) -> str:
    """The innermost frame outside this module: where the user's code failed."""
    frames = [f for f in traceback.extract_tb(trace) if f.filename != __file__]
    if not frames:
        return ""
    frame = frames[-1]
    return f" ({os.path.basename(frame.filename)}, line {frame.lineno})"
