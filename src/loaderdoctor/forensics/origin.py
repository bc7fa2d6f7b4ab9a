"""Whose code raised an exception: the user's (dataset, collate_fn, worker_init_fn) or ours.

A failure of loaderdoctor's own machinery must never read as a verdict about the user's job:
it becomes the ``internal-error`` cause, which asks to be reported.
"""

from __future__ import annotations

import os
import re
import traceback
from types import TracebackType

# src/loaderdoctor; the demo's datasets play the user's part and are not "ours".
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_OURS = (os.path.join(PACKAGE_DIR, "demo") + os.sep,)
FRAME_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')


def _ours(path: str) -> bool:
    path = os.path.abspath(path)
    return path.startswith(PACKAGE_DIR + os.sep) and not path.startswith(NOT_OURS)


def _describe(path: str, line: int | str, function: str) -> str:
    relative = os.path.relpath(os.path.abspath(path), os.path.dirname(PACKAGE_DIR))
    return f"{relative}:{line} in {function}"


def origin_in_text(traceback_text: str) -> str | None:
    """``"loaderdoctor/x.py:12 in f"`` when the innermost frame of a formatted traceback is ours."""
    last = None
    for line in traceback_text.splitlines():
        match = FRAME_LINE.match(line)
        if match:
            last = match
    if last is None or not _ours(last.group("file")):
        return None
    return _describe(last.group("file"), last.group("line"), last.group("function"))


def origin_of(error: BaseException) -> str | None:
    """The same, for a live exception: its innermost traceback frame, when that frame is ours."""
    tb: TracebackType | None = error.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if not _ours(code.co_filename):
        return None
    return _describe(code.co_filename, tb.tb_lineno, code.co_name)


def format_traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


__all__ = ["PACKAGE_DIR", "format_traceback", "origin_in_text", "origin_of"]
