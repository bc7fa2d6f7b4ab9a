"""The file a streaming library reads a stream item from, named before it reads it (in a worker).

litdata's and MosaicML's ``StreamingDataset`` read each item through a method of their own that
they call by attribute: litdata's ``__next__`` calls ``self.__getitem__(ChunkedIndex(...))`` (the
chunk is known), MosaicML's ``Array.__getitem__`` calls ``self.get_item(sample_id)`` (its
``spanner`` maps the id to its shard). A worker wraps that method on its own copy of the dataset
(an attribute of the instance; the class and the main process's object are left as they are) and
writes the item's id and file to its flight-recorder slot before the library reads it: a worker
that dies with the item in flight (a SIGKILL, a segfault in a decoder) is named by its chunk or
shard file, and an exception carries the same names in its tags. A layout this module does not
know, or a lookup that fails, names nothing: never a wrong name, never an error of ours.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any

from loaderdoctor.boundary import ROW_SAMPLES
from loaderdoctor.recorder import WorkerSlot

# (the library's top-level module, the method it reads an item through, how to name the item)
Describe = Callable[[Any, Any], "tuple[str, str] | None"]


def _litdata_chunk(dataset: Any, index: Any) -> tuple[str, str] | None:
    """A ``ChunkedIndex``: its global index, and its chunk's file."""
    chunk_index = getattr(index, "chunk_index", None)
    if not isinstance(chunk_index, int) or dataset.cache is None:
        return None
    config = dataset.cache._reader.config  # raises until litdata has read its index file
    return str(index.index), str(config.download_filepath(chunk_index))


def _mosaic_shard(dataset: Any, sample_id: Any) -> tuple[str, str] | None:
    """A sample id: itself, and its shard's (first) file."""
    shard_id, _ = dataset.spanner[int(sample_id)]
    shard = dataset.shards[shard_id]
    raw, _ = shard.file_pairs[0]
    return str(int(sample_id)), os.path.join(shard.dirname, shard.split, raw.basename)


LIBRARIES: tuple[tuple[str, str, str, Describe], ...] = (
    ("litdata", "litdata.streaming.dataset", "__getitem__", _litdata_chunk),
    ("streaming", "streaming.base.dataset", "get_item", _mosaic_shard),
)


class LibraryNames:
    """The last item a library was asked for in this worker: (stream position, id, file)."""

    def __init__(self, slot: WorkerSlot | None) -> None:
        self.slot = slot
        self.last: tuple[int, str, str] | None = None

    def attach(self, dataset: Any) -> None:
        """Wrap the dataset's reading method, where it is a library's this module knows."""
        for _library, module, method, describe in LIBRARIES:
            defined = getattr(type(dataset), method, None)
            if defined is None or not _from_module(type(dataset), module):
                continue
            current = vars(dataset).get(method) if hasattr(dataset, "__dict__") else None
            trail = getattr(current, "loaderdoctor_names", None)
            if trail is not None:
                trail[0] = self  # a re-opened stream: this one names its items
                return
            try:
                setattr(dataset, method, _naming(weakref.ref(dataset), defined, describe, self))
            except (AttributeError, TypeError):  # slots, a frozen class: nothing is named
                pass
            return

    def tags(self, position: int) -> dict[str, str]:
        """The names of the item at ``position`` for an exception's tags, if it was named."""
        last = self.last
        if last is None or last[0] != position:
            return {}
        return {"record_key": last[1], "record_url": last[2]}

    def named(self, key: str, file: str) -> None:
        slot = self.slot
        if slot is None:
            return
        flat, base, _ = slot.hot_path()
        position = int(flat[base + ROW_SAMPLES]) - 1  # set before the stream is asked
        self.last = (position, key, file)
        slot.name_item(position, key, file)


def _from_module(cls: type, module: str) -> bool:
    return any(klass.__module__ == module for klass in cls.__mro__)


def _naming(
    dataset_ref: weakref.ref[Any], defined: Any, describe: Describe, names: LibraryNames
) -> Any:
    """The library's method, naming the item first. It holds the dataset weakly: an instance
    attribute that held it would be a reference cycle through the dataset."""
    trail = [names]

    def read_named(index: Any, *args: Any, **kwargs: Any) -> Any:
        dataset = dataset_ref()
        try:
            named = describe(dataset, index)
        except Exception:  # the library's layout changed: name nothing
            named = None
        if named is not None:
            trail[0].named(*named)
        return defined(dataset, index, *args, **kwargs)

    read_named.loaderdoctor_names = trail  # type: ignore[attr-defined]
    return read_named
