"""Healing's public pieces: the warning every healing action emits, and the resumed sampler.

The decisions are in ``heal_policy`` (pure); the iterator carries them out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from loaderdoctor.supervise.heal_policy import ENVIRONMENTAL


class HealWarning(UserWarning):
    """Emitted for every healing action: healing is loud, never silent."""


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


__all__ = ["ENVIRONMENTAL", "HealWarning", "ResumeSampler", "length_of"]
