"""Every private name of CPython's standard library that loaderdoctor reaches, in one place.

As ``torch_compat`` is for torch: nowhere else may code read or set a private attribute of the
standard library, so that a Python release that renames one breaks here, where
``tests/test_cpython_compat.py`` checks each name on the running interpreter, and nowhere else.
Each accessor says why the public API does not do.

- ``sys._getframe``: the frames that build a loader or warn, without ``inspect.stack()``'s cost
  of reading every frame's source lines.
- ``multiprocessing.queues.Queue._reader`` and ``._rlock``: torch's result queue read with a
  timeout per chunk, so that a half-written message of a dying worker cannot block ``get()``.
- ``multiprocessing.queues.Queue._on_queue_feeder_error``: the feeder thread's error hook, the
  only place a batch that failed to pickle is seen (stock prints it and the batch is gone).
- ``multiprocessing.current_process()._inheriting``: set while a spawned child re-imports the
  main module (``multiprocessing.spawn`` sets it), when no loader may start workers.
- ``multiprocessing.current_process()._config``: whether the worker's multiprocessing temp dir
  was inherited from the parent (then it is the parent's to remove).
- ``multiprocessing.resource_sharer._ResourceSharer``, its ``_serve`` and ``_listener``: the
  thread that hands tensors' descriptors to the main process, guarded for EMFILE.
- ``multiprocessing.synchronize.Semaphore._semlock``: a semaphore's slot count (``maxvalue``),
  to say how many of its slots are taken when workers that hold them are killed.
- ``argparse._SubParsersAction`` and ``ArgumentParser._actions``: the subcommand's own usage
  line for an unknown option (argparse gives the top level's).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

# (owner, name): every private name reached, for the test that checks each on this interpreter.
PRIVATE_NAMES: tuple[tuple[str, str], ...] = (
    ("sys", "_getframe"),
    ("multiprocessing.queues.Queue", "_reader"),
    ("multiprocessing.queues.Queue", "_rlock"),
    ("multiprocessing.queues.Queue", "_on_queue_feeder_error"),
    ("multiprocessing.process.BaseProcess", "_config"),
    ("multiprocessing.process.BaseProcess", "_inheriting"),
    ("multiprocessing.resource_sharer", "_ResourceSharer"),
    ("multiprocessing.resource_sharer._ResourceSharer", "_serve"),
    ("multiprocessing.resource_sharer._ResourceSharer", "_listener"),
    ("multiprocessing.synchronize.Semaphore", "_semlock"),
    ("argparse", "_SubParsersAction"),
    ("argparse.ArgumentParser", "_actions"),
)


def caller_frame(depth: int = 1) -> FrameType:
    """The frame ``depth`` calls out from the caller of this function (1: the caller's caller)."""
    return sys._getframe(depth + 1)


def queue_reader(result_queue: Any) -> Any:
    """The receiving ``Connection`` of a ``multiprocessing`` queue."""
    return result_queue._reader


def queue_read_lock(result_queue: Any) -> Any:
    """The lock a ``multiprocessing`` queue's readers hold while they read one message."""
    return result_queue._rlock


def feeder_error_hook() -> Callable[[BaseException, object], None]:
    import multiprocessing.queues

    queue_class: Any = multiprocessing.queues.Queue
    hook: Callable[[BaseException, object], None] = queue_class._on_queue_feeder_error
    return hook


def set_feeder_error_hook(hook: Callable[[BaseException, object], None]) -> None:
    """Every queue of this process calls ``hook(error, obj)`` where pickling a put object fails."""
    import multiprocessing.queues

    queue_class: Any = multiprocessing.queues.Queue
    queue_class._on_queue_feeder_error = staticmethod(hook)


def temp_dir_inherited() -> bool:
    """Whether this process's multiprocessing temp dir came with it through fork."""
    import multiprocessing

    config: dict[str, Any] = multiprocessing.current_process()._config  # type: ignore[attr-defined]
    return bool(config.get("tempdir"))


def spawn_bootstrapping() -> bool:
    """Whether this process is a spawned child still re-importing its parent's main module."""
    import multiprocessing

    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def resource_sharer_class() -> Any:
    """The class of the thread that serves descriptors to other processes; None where this
    Python's multiprocessing has none by that name."""
    from multiprocessing import resource_sharer

    return getattr(resource_sharer, "_ResourceSharer", None)


def sharer_serve(sharer_class: Any) -> Callable[[Any], None]:
    serve: Callable[[Any], None] = sharer_class._serve
    return serve


def set_sharer_serve(sharer_class: Any, serve: Callable[[Any], None]) -> None:
    sharer_class._serve = serve


def sharer_listener(sharer: Any) -> Any:
    """The ``Listener`` a running resource sharer accepts connections on."""
    return sharer._listener


def semaphore_slots(semaphore: Any) -> int | None:
    """How many slots a ``multiprocessing`` (Bounded)Semaphore was made with; None where this
    Python does not say."""
    most = getattr(getattr(semaphore, "_semlock", None), "maxvalue", None)
    return most if isinstance(most, int) else None


def subcommand_parsers(parser: argparse.ArgumentParser) -> Any:
    """The ``add_subparsers()`` action of ``parser`` (its ``choices``: name -> parser)."""
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action


__all__ = [
    "PRIVATE_NAMES",
    "caller_frame",
    "feeder_error_hook",
    "queue_read_lock",
    "queue_reader",
    "resource_sharer_class",
    "semaphore_slots",
    "set_feeder_error_hook",
    "set_sharer_serve",
    "sharer_listener",
    "sharer_serve",
    "spawn_bootstrapping",
    "subcommand_parsers",
    "temp_dir_inherited",
]
