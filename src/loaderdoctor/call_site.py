"""Where a DataLoader was built: the line of the code that built it, the user's own line where a
library built it for them, and the variable or attribute the user's line assigned it to.

Several loaders (train and val, a framework's eval loader) each get their own incidents: the
report names each incident's loader by these, so "sample 37" is never ambiguous.
"""

from __future__ import annotations

import linecache
import os
import re
from typing import Any

from loaderdoctor import cpython_compat

# `train_loader = DataLoader(`, `self.val_loader: DataLoader = ...`: the name the user's line gives
_ASSIGNED = re.compile(r"^\s*((?:self\.)?[A-Za-z_]\w*)\s*(?::[^=]+)?=(?!=)")


def loader_site() -> str:
    """``building_site()``, with the name the user's line assigned the loader to, where it has
    one: ``val_loader (train.py:41)``."""
    frame = _user_frame(_past_ours(cpython_compat.caller_frame()))
    site = building_site()
    if frame is None:
        return site
    match = _ASSIGNED.match(linecache.getline(frame.f_code.co_filename, frame.f_lineno))
    return f"{match.group(1)} ({site})" if match else site


def building_site() -> str:
    """``file:line`` of the code that built the loader, and the user's own line where that differs
    (``accelerate/data_loader.py:1093 (from train.py:40)``)."""
    frame = _past_ours(cpython_compat.caller_frame())  # past __new__ and this package
    if frame is None:
        return "?"
    caller = _frame_site(frame)
    user_frame = _user_frame(frame)
    user = None if user_frame is None else _frame_site(user_frame)
    return caller if user is None or user == caller else f"{caller} (from {user})"


def _past_ours(frame: Any) -> Any:
    while frame is not None and frame.f_code.co_filename.startswith(_MACHINERY):
        frame = frame.f_back  # past __new__, the run's patch and the supervised loader's own
    return frame


def _user_frame(frame: Any) -> Any:
    """The first frame from ``frame`` outwards that is not a library's (None: none is)."""
    while frame is not None and _is_library_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _is_library_file(filename: str) -> bool:
    return (
        "site-packages" in filename
        or "dist-packages" in filename
        or filename.startswith(_STDLIB)
        or filename.startswith("<frozen")
    )


_STDLIB = os.path.dirname(os.__file__)
_OURS = os.path.dirname(os.path.abspath(__file__))  # the loaderdoctor package
# Ours that builds no loader of the user's: a loader built by our demo, scan or tune is theirs
_MACHINERY = (
    *(os.path.join(_OURS, part) + os.sep for part in ("runner", "supervise")),
    os.path.abspath(__file__),
)


def _frame_site(frame: Any) -> str:
    filename = frame.f_code.co_filename
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            break
    else:
        try:
            relative = os.path.relpath(filename)
        except ValueError:
            relative = filename
        if not relative.startswith(".."):
            filename = relative
    return f"{filename}:{frame.f_lineno}"


__all__ = ["building_site", "loader_site"]
