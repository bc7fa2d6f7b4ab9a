"""Names of a stream's items read between a pipeline's stages (WebDataset), in a worker.

A WebDataset item is named by its ``__key__`` and ``__url__`` as it leaves the tar reader; the
user's later stages may drop them (``.to_tuple("jpg", "cls")``) or die on the item (a decoder's
SIGSEGV, the OOM killer), and then the item that reaches the loader, if any, says nothing. So the
worker iterates a copy of the pipeline with a tap after each stage (the user's object is left as
it is): every keyed item that passes a tap writes its key to the flight recorder, counted by how
many items that tap has passed, and the last tap pairs each item the pipeline yields with the
key last written. A count is the stream position only where every stage after that tap yields
one item per item (``map``, ``decode``, ``to_tuple``, ``rename``): a filter, a shuffle buffer or
a batching stage in between makes the counts disagree, and then no name is given, never a wrong
one.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from loaderdoctor.recorder import WorkerSlot


def is_pipeline(dataset: Any) -> bool:
    """A WebDataset ``DataPipeline`` (``wds.WebDataset(...)``, ``wds.DataPipeline(...)``) whose
    iteration is WebDataset's own: its stages are a list it calls one after the other."""
    iterate = getattr(type(dataset), "__iter__", None)
    return (
        isinstance(getattr(dataset, "pipeline", None), list)
        and bool(dataset.pipeline)
        and getattr(iterate, "__module__", "").split(".")[0] == "webdataset"
    )


class NameTrail:
    """The names of one worker's stream items: the last keyed item seen between two stages, and
    the key of each item the pipeline yielded, by stream position, until its batch is taken."""

    def __init__(self, slot: WorkerSlot | None) -> None:
        self.slot = slot
        self.base = 0  # the stream position of the pipeline's first item
        self.last: tuple[int, str] | None = None  # (items that tap had passed, key)
        self.keys: dict[int, str] = {}

    def open(self, dataset: Any, base: int) -> Iterator[Any]:
        """``iter(dataset)``, through a copy with taps where ``dataset`` is a pipeline."""
        if not is_pipeline(dataset):
            return iter(dataset)
        self.base, self.last = base, None
        tapped = copy.copy(dataset)
        stages: list[Any] = []
        for stage in dataset.pipeline:
            stages += [stage, _Tap(self)]
        stages[-1] = _LastTap(self)
        tapped.pipeline = stages
        return iter(tapped)

    def seen(self, count: int, item: Any) -> None:
        if not isinstance(item, dict):
            return
        key = item.get("__key__")
        if not isinstance(key, str):
            return
        self.last = (count, key)
        if self.slot is not None:
            url = item.get("__url__")
            self.slot.name_item(self.base + count, key, url if isinstance(url, str) else None)

    def yielded(self, count: int, item: Any) -> None:
        self.seen(count, item)
        last = self.last
        if last is not None and last[0] == count:
            self.keys[self.base + count] = last[1]

    def key_at(self, position: int) -> str | None:
        return self.keys.get(position)

    def forget_before(self, position: int) -> None:
        if self.keys:
            self.keys = {p: k for p, k in self.keys.items() if p >= position}


class _Tap:
    """A stage that passes its input on, naming each keyed item (one per pipeline gap). Its
    count goes on across the pipeline's repetitions (``.repeat()`` calls every stage again)."""

    def __init__(self, trail: NameTrail) -> None:
        self.trail = trail
        self.count = 0

    def __call__(self, source: Any) -> Iterator[Any]:
        seen = self.trail.seen
        for item in source:
            seen(self.count, item)
            self.count += 1
            yield item


class _LastTap(_Tap):
    def __call__(self, source: Any) -> Iterator[Any]:
        yielded = self.trail.yielded
        for item in source:
            yielded(self.count, item)
            self.count += 1
            yield item


__all__ = ["NameTrail", "is_pipeline"]
