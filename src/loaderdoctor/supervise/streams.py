"""Where each worker's stream stands (IterableDataset), and how a re-started worker resumes it.

A stream worker's batches travel wrapped in a ``StreamBatch`` that says which positions of that
worker's stream they hold (and the items' keys where they expose one). The main process unwraps it
before torch sees the batch and keeps a ``StreamProgress``: per worker, the end of what the user
received, the positions skipped on purpose, whether the stream ended. When a pool is re-started,
every worker gets a ``StreamResume``: re-create the iterator as torch does (``iter(dataset)`` under
the same ``get_worker_info()``), fast-forward past what was delivered, skip the culprit, go on.

A dataset with ``state_dict()``/``load_state_dict()`` (torchdata's ``Stateful``) resumes from the
state its worker sent with its last delivered batch instead of replaying. A dataset that sets
``loaderdoctor_replayable = False`` says its stream cannot be replayed; a replay whose items differ
from the delivered ones (by key) shows it too. Either way the loss is said, never hidden.
"""

from __future__ import annotations

import inspect
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from loaderdoctor.supervise.containment import listed
from loaderdoctor.supervise.heal import HealWarning, user_stacklevel

# What was learnt about an incident after it was written: (its id, an evidence line, a stream
# culprit's key or None, the action it turned out to be or None): ``repair.follow_up``
Learnt = tuple[int, str, Any, str | None]
# The action of a death whose stream was not replayed as delivered (items may be duplicated or
# lost): the run is then "healed-with-loss"
NOT_REPLAYED = "lost"
# The last few delivered items of each worker whose keys a replay is checked against.
CHECKED_KEYS = 64
REPLAYABLE_ATTRIBUTE = "loaderdoctor_replayable"


def not_replayed_note(
    worker_id: Any, position: int, delivered: Any, replayed: Any, items: int
) -> str:
    """What is said of a stream whose replay read another item where one was delivered."""
    return (
        f"stream of worker {worker_id} is not replayable: its item #{position} was "
        f"{delivered!r} when delivered and {replayed!r} when replayed, so up to {items} items "
        "may be duplicated or lost"
    )


def item_key(item: Any) -> Any:
    """A cheap name for a stream item: a WebDataset ``__key__``, a file name, a small scalar."""
    if isinstance(item, dict):
        key = item.get("__key__")
        return key if isinstance(key, (str, int)) else None
    if isinstance(item, (str, int)) and not isinstance(item, bool):
        return item if not isinstance(item, str) or len(item) <= 4096 else None
    if isinstance(item, tuple) and item and isinstance(item[0], str) and len(item[0]) <= 4096:
        return item[0]  # (path, payload) pairs: the path names the item
    return None


# Streams whose own state does not resume them exactly, matched along the dataset's MRO by the
# (module, class) that defines the behaviour: a re-started worker replays them instead (replay
# is exact where the stream is deterministic, as these are). Hugging Face datasets'
# IterableDataset saves no shuffle buffer's content in its state_dict() (its docs: "examples
# from shuffle buffers are lost when resuming"; measured with datasets 5.2.0, a worker killed
# mid-epoch and resumed from its state: 3 items delivered twice and 11 lost, without a word),
# re-applies a loaded state at every later epoch of the same number (a persistent worker's next
# epoch, without set_epoch(), began where the dead one stood: 8 to 12 items lost), and in a
# worker, where two workers share a shuffled stream, raises IndexError loading a state it saved.
INEXACT_STATE: dict[tuple[str, str], str] = {
    ("datasets.iterable_dataset", "IterableDataset"): (
        "Hugging Face datasets' IterableDataset does not save its shuffle buffer's content, and "
        "re-applies a loaded state at later epochs"
    ),
}


def inexact_state(dataset: Any) -> str | None:
    """Why the dataset's own state does not resume its stream exactly (``INEXACT_STATE``), or
    None."""
    return listed(dataset, INEXACT_STATE)


def is_stateful(dataset: Any) -> bool:
    """The dataset speaks torchdata's ``Stateful`` protocol: ``state_dict()`` with no argument,
    ``load_state_dict(state)``, and its state resumes it exactly (``INEXACT_STATE``). Libraries
    with methods of those names and another protocol (MosaicML ``streaming``'s ``state_dict(
    num_samples, from_beginning)``, litdata's ``state_dict(num_samples_yielded, num_workers,
    batch_size)``, both meant for their own loader's main process) are not called: their streams
    resume by replay, as any other stream's."""
    if inexact_state(dataset) is not None:
        return False
    state_dict = getattr(dataset, "state_dict", None)
    load_state_dict = getattr(dataset, "load_state_dict", None)
    if not callable(state_dict) or not callable(load_state_dict):
        return False
    return _takes(state_dict, 0) and _takes(load_state_dict, 1)


def _takes(method: Any, arguments: int) -> bool:
    """``method`` can be called with ``arguments`` positional arguments (unknown: assumed so)."""
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):  # a builtin without a signature: trust its name
        return True
    try:
        signature.bind(*range(arguments))
    except TypeError:
        return False
    return True


def declared_replayable(dataset: Any) -> bool:
    return bool(getattr(dataset, REPLAYABLE_ATTRIBUTE, True))


class StreamBatch:
    """A stream worker's batch on its way to the main process, with the positions it holds.

    ``first``/``end``: the stream positions this batch covers (``end`` exclusive, counting items
    skipped on purpose); ``items``: how many items it holds. ``keys``: (position, key) of its items that have a key. ``state``: the
    dataset's ``state_dict()`` after this batch (Stateful datasets only). ``notes``: what the
    worker has to say (a replay that did not match). ``culprits``: (position, key) of items in
    flight at a death, read again (re-tried) when the stream resumed: their keys name them.
    """

    __slots__ = (
        "batch",
        "culprits",
        "end",
        "events",
        "first",
        "items",
        "keys",
        "notes",
        "state",
        "worker_id",
    )

    def __init__(
        self,
        batch: Any,
        worker_id: int,
        first: int,
        end: int,
        items: int,
        keys: tuple[tuple[int, Any], ...] = (),
        state: Any = None,
        notes: tuple[str, ...] = (),
        culprits: tuple[tuple[int, Any], ...] = (),
        events: tuple[dict[str, Any], ...] = (),
    ) -> None:
        self.batch = batch
        self.worker_id = worker_id
        self.first = first
        self.end = end
        self.items = items
        self.keys = keys
        self.state = state
        self.notes = notes
        self.culprits = culprits
        self.events = events  # skips of its items: counted when the user receives it

    def pin_memory(self, device: Any = None) -> StreamBatch:
        """torch's pin thread calls this: pin the batch inside, keep the positions."""
        from loaderdoctor import torch_compat

        pinned = torch_compat.pin_memory(self.batch, device)
        return StreamBatch(
            pinned,
            self.worker_id,
            self.first,
            self.end,
            self.items,
            self.keys,
            self.state,
            self.notes,
            self.culprits,
            self.events,
        )

    def __repr__(self) -> str:
        return f"StreamBatch(worker {self.worker_id}, positions {self.first}..{self.end - 1})"


@dataclass(frozen=True)
class StreamResume:
    """What a re-started worker needs to resume its stream where the user's copy stands."""

    skip: int  # positions delivered already: replayed and dropped (or restored from ``state``)
    # the items in flight at deaths, re-tried once: read again and delivered (their keys name
    # them)
    culprits: frozenset[int] = frozenset()
    reported: frozenset[int] = frozenset()  # skips the main process counted already
    ended: bool = False  # the stream had ended: stays ended
    keys: tuple[tuple[int, Any], ...] = ()  # (position, key) of delivered items, to check
    state: Any = None  # a Stateful dataset's state at ``skip``
    replayable: bool = True
    # An item that killed its worker twice: the stream ends just before it (a generator cannot
    # be read past it), so every item before it still arrives.
    stop: int | None = None
    # The loader restores the stream itself (torchdata, from its own state): positions go on
    # from ``base``; nothing is replayed, dropped or loaded here.
    base: int | None = None


@dataclass
class _WorkerStream:
    delivered_end: int = 0
    culprits: set[int] = field(default_factory=set)
    reported: set[int] = field(default_factory=set)
    ended: bool = False
    stop: int | None = None  # ends just before this position: it killed its worker twice
    keys: deque[tuple[int, Any]] = field(default_factory=lambda: deque(maxlen=CHECKED_KEYS))
    state: Any = None
    has_state: bool = False
    unreplayable: bool = False  # a replay of it did not match: its replayed keys name nothing
    # position -> the id of the incident of the death there, while its key is not known
    culprit_incidents: dict[int, int] = field(default_factory=dict)


class StreamProgress:
    """The main process's view of every worker's stream, shared along a chain of re-started pools."""

    def __init__(self, replayable: bool = True) -> None:
        self.workers: dict[int, _WorkerStream] = {}
        self.replayable = replayable
        self.notes: list[str] = []  # non-replay findings not yet warned about
        self.incident: int | None = None  # the id of the last death's incident healed by a resume
        # What was learnt about incidents written before (``Learnt``)
        self.learnt: list[Learnt] = []
        # The resumes of the next re-started pool, where its loader decides them (torchdata)
        self.planned: dict[int, StreamResume] | None = None

    def _of(self, worker_id: int) -> _WorkerStream:
        return self.workers.setdefault(worker_id, _WorkerStream())

    def delivered(self, batch: StreamBatch) -> int:
        """The user received ``batch``: advance its worker. Returns the number of items in it."""
        stream = self._of(batch.worker_id)
        stream.delivered_end = max(stream.delivered_end, batch.end)
        stream.keys.extend(batch.keys)
        if batch.state is not None:
            stream.state, stream.has_state = batch.state, True
        self.notes.extend(batch.notes)
        if batch.notes:
            stream.unreplayable = True
        # a replay that did not match cannot name what was in flight before it
        for position, key in () if stream.unreplayable else batch.culprits:
            if key is not None and position in stream.culprit_incidents:
                line = (
                    f"item #{position} of worker {batch.worker_id}'s stream has key {key!r} "
                    "(read again when the stream resumed)"
                )
                self.learnt.append((stream.culprit_incidents.pop(position), line, key, None))
        return batch.items

    def replayed(self, batch: StreamBatch) -> None:
        """A batch read again while the loader fast-forwards the streams it resumes (torchdata
        drops it): an item whose key differs from the one delivered at its position shows the
        stream is not replayable, said as a replay found so by its worker is."""
        stream = self._of(batch.worker_id)
        if stream.unreplayable or not batch.keys:  # said once
            return
        delivered = dict(stream.keys)
        for position, key in batch.keys:
            if position in delivered and delivered[position] != key:
                stream.unreplayable = True
                self.notes.append(
                    not_replayed_note(
                        batch.worker_id, position, delivered[position], key, stream.delivered_end
                    )
                )
                return

    def say_notes(self) -> None:
        """Warn of each finding not said yet (a replay that did not match, a stream that says it
        cannot be replayed); it is learnt about the last death a resume healed, whose action it
        turns to ``NOT_REPLAYED``."""
        for note in self.notes:
            warnings.warn(f"loaderdoctor: {note}", HealWarning, stacklevel=user_stacklevel())
            if self.incident is not None:
                self.learnt.append((self.incident, note, None, NOT_REPLAYED))
        self.notes.clear()

    def take_learnt(self) -> list[Learnt]:
        """What was learnt about incidents since the last call (``repair.follow_up``)."""
        learnt, self.learnt = self.learnt, []
        return learnt

    def ended(self, worker_id: int) -> None:
        self._of(worker_id).ended = True

    def not_ended(self, worker_id: int) -> None:
        """Its end was seen, but not all of its batches reached the user: a replay re-reads them."""
        self._of(worker_id).ended = False

    def skipped(self, worker_id: int | None, position: int | None) -> None:
        """A skip the main process counted (an ``on_error`` event): a replay must not count it again."""
        if worker_id is not None and position is not None:
            self._of(worker_id).reported.add(position)

    def culprit(self, worker_id: int, position: int) -> bool:
        """The item in flight at a death: re-tried once when the stream resumes, as a map-style
        sample is. False when the same position killed this worker before: the stream then ends
        just before it (``stop``)."""
        stream = self._of(worker_id)
        if position in stream.culprits:
            stream.stop = position if stream.stop is None else min(stream.stop, position)
            return False
        stream.culprits.add(position)
        return True

    def incident_written(self, incident: Any, worker_id: int, position: int, retried: bool) -> None:
        """The incident of the death at ``position`` is written: a replay found not to match is
        learnt about it, and so is the key of a culprit ``retried``, read when it is re-tried."""
        self.incident = incident.id
        if retried and incident.diagnosis.key is None:
            self._of(worker_id).culprit_incidents[position] = incident.id

    def any_delivered(self) -> bool:
        """Some item of some worker's stream reached the user (or was skipped past)."""
        return any(stream.delivered_end for stream in self.workers.values())

    def delivered_end(self, worker_id: int) -> int:
        return self._of(worker_id).delivered_end

    def resume_for(self, worker_id: int) -> StreamResume:
        stream = self._of(worker_id)
        return StreamResume(
            skip=stream.delivered_end,
            culprits=frozenset(p for p in stream.culprits if p >= stream.delivered_end),
            reported=frozenset(p for p in stream.reported if p >= stream.delivered_end),
            ended=stream.ended,
            keys=tuple(stream.keys),
            state=stream.state if stream.has_state else None,
            replayable=self.replayable,
            stop=stream.stop,
        )

    def resume_after(self, worker_id: int, buffered: list[StreamBatch]) -> StreamResume:
        """The resume of a worker replaced alone: past its batches the main process holds but
        has not delivered yet (torch's reorder buffer keeps them, so they are not replayed)."""
        resume = self.resume_for(worker_id)
        if not buffered:
            return resume
        last = max(buffered, key=lambda batch: batch.end)
        if last.end <= resume.skip:
            return resume
        return replace(
            resume,
            skip=last.end,
            culprits=frozenset(p for p in resume.culprits if p >= last.end),
            reported=frozenset(p for p in resume.reported if p >= last.end),
            state=last.state if last.state is not None else resume.state,
        )

    def resumes(self, num_workers: int) -> dict[int, StreamResume]:
        if self.planned is not None:
            return self.planned
        return {worker_id: self.resume_for(worker_id) for worker_id in range(num_workers)}

    def take_events(
        self, take: Callable[[dict[str, Any]], None]
    ) -> Callable[[dict[str, Any]], None]:
        """Wraps the supervision's event sink: stream skips are remembered by position first."""

        def take_event(event: dict[str, Any]) -> None:
            if event.get("action") == "skipped":
                self.skipped(event.get("worker"), event.get("position"))
            take(event)

        return take_event


def new_stream_progress(loader: Any) -> StreamProgress | None:
    """A fresh progress for a loader over an IterableDataset (None for map-style)."""
    from loaderdoctor import torch_compat

    if not torch_compat.is_iterable(loader):
        return None
    return StreamProgress(declared_replayable(loader.dataset))


__all__ = [
    "CHECKED_KEYS",
    "INEXACT_STATE",
    "NOT_REPLAYED",
    "REPLAYABLE_ATTRIBUTE",
    "Learnt",
    "StreamBatch",
    "StreamProgress",
    "StreamResume",
    "declared_replayable",
    "inexact_state",
    "is_stateful",
    "item_key",
    "new_stream_progress",
    "not_replayed_note",
]
