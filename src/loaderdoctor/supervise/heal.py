"""Healing's public pieces: the warning every healing action emits, and the resumed sampler.

The decisions are in ``heal_policy`` (pure); the iterator carries them out.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from loaderdoctor import cpython_compat
from loaderdoctor.supervise.heal_policy import ENVIRONMENTAL


class HealWarning(UserWarning):
    """Emitted for every healing action: healing is loud, never silent."""


# Every action warns, two worded alike too (two loaders built at one line skipping one sample):
# Python's default action shows a message once per line of code. Appended, so that a user's -W,
# PYTHONWARNINGS or filterwarnings() still decides first.
warnings.filterwarnings("always", category=HealWarning, append=True)


def _package_dir(name: str) -> str | None:
    """Where an installed package lives, found without importing it (torchdata is optional)."""
    spec = importlib.util.find_spec(name)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return os.path.abspath(locations[0]) + os.sep if locations else None


# Frames in these directories are not the user's: a warning points past them (torchdata's
# StatefulDataLoader iterates in its own module, between the user's loop and ours).
_INTERNAL_DIRS = tuple(
    path
    for path in (
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
        os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
        _package_dir("torchdata"),
    )
    if path is not None
)


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning point at the user's line (the ``for batch in
    loader`` line), past every frame of loaderdoctor and torch, whatever path led here, and past
    an installed framework's too (Composer's ``trainer.py``, Lightning's fit loop, Ray's
    ``train_loop_utils.py``) where a frame of the user's own code is further out; where none
    is (the loop runs in a framework's thread), the first frame past ours and torch's."""
    frame = cpython_compat.caller_frame()  # the function that is about to call warnings.warn
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_INTERNAL_DIRS):
        frame = frame.f_back
        level += 1
    outside: Any = frame
    outer_level = level
    while outside is not None and _installed(outside.f_code.co_filename):
        outside = outside.f_back
        outer_level += 1
    return outer_level if outside is not None else level


def _installed(filename: str) -> bool:
    """A frame of an installed package or of Python's own library, not of the user's code."""
    return (
        "site-packages" in filename
        or "dist-packages" in filename
        or filename.startswith(_STDLIB)
        or filename.startswith("<frozen")
    )


_STDLIB = os.path.dirname(os.__file__) + os.sep


# How every HealWarning of a failure healed begins (``warn_healed``).
HEALED = "loaderdoctor healed: "
# Skips and replacements warn one by one up to this many per loader; the report counts them all.
SAMPLE_WARNINGS = 10


def warn_healed(title: str, cause: str, outcome: str) -> None:
    """The HealWarning of a failure healing carried on from (``outcome``: what it did, and to
    what), at the user's line."""
    warnings.warn(
        f"{HEALED}{title} [{cause}] -> {outcome}",
        HealWarning,
        stacklevel=user_stacklevel(),
    )


def warn_sample_action(
    title: str, cause: str, action: str, event: dict[str, Any], seen: int
) -> None:
    """The HealWarning for a sample skipped or replaced inside a worker (``seen``: how many such
    actions this loader had before this one). A corrupt shard can skip thousands: after
    ``SAMPLE_WARNINGS`` one last warning says the rest are only counted."""
    if seen > SAMPLE_WARNINGS:
        return
    if seen == SAMPLE_WARNINGS:
        message = (
            f"{HEALED}more than {SAMPLE_WARNINGS} samples skipped or replaced; the "
            "rest are not warned about one by one (loader.report counts every one)"
        )
    else:
        position = event.get("position")
        if position is not None:
            worker = event.get("worker")
            whose = f"worker {worker}'s" if worker is not None else "the"
            what = f"item #{position} of {whose} stream"
        else:
            what = f"sample {event.get('index')!r}"
        if action == "replaced":
            what += f", replaced by sample {event.get('substitute')!r}"
        outcome = f"{action} ({what})"
        if event.get("note"):
            outcome += f"; {event['note']}"
        warn_healed(title, cause, outcome)
        return
    warnings.warn(message, HealWarning, stacklevel=user_stacklevel())


class ResumeSampler:
    """The batches still owed (undelivered, in order), then the rest of the interrupted epoch."""

    def __init__(self, pending: list[Any], remaining: Iterator[Any], length: int | None) -> None:
        self.pending = pending
        self.remaining = remaining
        self.length = length

    def __iter__(self) -> Iterator[Any]:
        yield from self.pending
        yield from self.remaining

    def __len__(self) -> int:
        if self.length is None:
            raise TypeError("the interrupted sampler has no length")
        return self.length


def length_of(sampler: Any) -> int | None:
    try:
        return len(sampler)
    except TypeError:
        return None


__all__ = [
    "ENVIRONMENTAL",
    "SAMPLE_WARNINGS",
    "HealWarning",
    "ResumeSampler",
    "length_of",
    "user_stacklevel",
    "warn_sample_action",
]
