"""A worker's resource sharer at its descriptor limit: a recorded death, not a hang.

Under the ``file_descriptor`` sharing strategy (Linux's default) each tensor of a batch reaches
the main process as a descriptor handed over by the worker's resource-sharer thread
(``multiprocessing.resource_sharer``), on a connection the main process opens while it unpickles
the batch. When the worker is at its RLIMIT_NOFILE, that thread's ``accept()`` fails with EMFILE;
the standard library prints the error and accepts again, failing again, while the main process's
connection waits in the listen backlog and the main thread waits for ever in the middle of
unpickling: nothing in the main process can cut that wait.

The guard ends the worker instead. Its listen socket closes, the main process's connection is
reset, and what the worker recorded before it exited becomes the verdict.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any

from loaderdoctor import cpython_compat

# How the worker exits after the recorded failure (the verdict comes from the record, not this)
EXIT_CODE = 1
OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})


def install(on_exhausted: Callable[[OSError], None]) -> None:
    """In a worker: make the resource sharer's ``accept()`` at the descriptor limit call
    ``on_exhausted(error)`` and end the process. Other errors keep the standard behaviour.

    The sharer's thread starts at the first tensor the worker sends (a forked worker starts
    with no sharer of its own), so patching its class here is in time.
    """
    sharer_class = cpython_compat.resource_sharer_class()
    if sharer_class is None:  # another Python's multiprocessing: nothing to guard
        return
    original = getattr(sharer_class, "_ld_original_serve", None) or cpython_compat.sharer_serve(
        sharer_class
    )

    def serve(sharer: Any) -> None:
        listener = cpython_compat.sharer_listener(sharer)
        accept = listener.accept

        def guarded_accept() -> Any:
            try:
                return accept()
            except OSError as error:
                if error.errno not in OUT_OF_DESCRIPTORS:
                    raise
                try:
                    on_exhausted(error)
                finally:
                    os._exit(EXIT_CODE)

        listener.accept = guarded_accept
        original(sharer)

    sharer_class._ld_original_serve = original
    cpython_compat.set_sharer_serve(sharer_class, serve)


__all__ = ["EXIT_CODE", "install"]
