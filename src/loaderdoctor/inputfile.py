"""Files a user hands us (a report, a checkpoint, a quarantine file), read without trusting them.

A path may name a FIFO (``open`` then blocks until a writer comes, forever in a script), a
device, a file of gigabytes, or JSON nested a hundred thousand deep (``json.loads`` raises
``RecursionError``, which no ``except ValueError`` catches). Each is the user's input error:
:class:`InputFileError`, a ``ValueError`` whose message is one line saying what the file is.
Stdlib only: the bootstrapped child of ``loaderdoctor run`` imports it.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

# Larger than any report, checkpoint or quarantine file we write for a million samples (a
# 1M-sample scan checkpoint is about 60 MB): a bigger file is not one of ours.
MAX_INPUT_BYTES = 1 << 30


class InputFileError(ValueError):
    """A file that cannot be one of ours (not a regular file, too big, nested too deeply)."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def read_bytes(path: str | os.PathLike[str], *, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file at ``path``; ``OSError`` as ``open`` raises it (a missing
    file stays ``FileNotFoundError``), :class:`InputFileError` for anything but a regular file.

    Opened with ``O_NONBLOCK`` and checked with ``fstat`` on the descriptor: a FIFO swapped in
    after a ``stat`` of the path cannot block the open, and is refused before any read.
    """
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise InputFileError(f"{os.fspath(path)} is {_kind(mode)}, not a file")
        size = os.fstat(descriptor).st_size
        if size > limit:
            raise InputFileError(
                f"{os.fspath(path)} has {size} bytes, more than any file loaderdoctor writes"
            )
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            return handle.read(limit + 1)[:limit]
    finally:
        os.close(descriptor)


def loads(text: str | bytes) -> Any:
    """``json.loads``, with JSON nested too deeply for the parser a ``ValueError`` too."""
    try:
        return json.loads(text)
    except RecursionError:
        raise InputFileError("JSON nested too deeply to be one of loaderdoctor's files") from None


def load_json(path: str | os.PathLike[str], *, limit: int = MAX_INPUT_BYTES) -> Any:
    """The JSON in the regular file at ``path`` (UTF-8; undecodable bytes a ``ValueError``)."""
    return loads(read_bytes(path, limit=limit))
