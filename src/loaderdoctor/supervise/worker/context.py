"""What one DataLoader worker knows while it loads, handed to its wrappers explicitly.

``SupervisedWorkerInit`` builds one ``WorkerContext`` in each worker, at its start, and gives it to
the dataset and collate_fn wrappers that worker loads with; an in-process iterator
(``num_workers=0``) builds its own. No module holds one: two loaders in one process never share
what they learned, and nothing a forked worker inherited from its parent carries over.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

from loaderdoctor.recorder import WorkerSlot
from loaderdoctor.supervise.live_quarantine import NO_LIVE_QUARANTINE, QuarantineReader


class EventOutbox:
    """The skip and replace events one worker decided, on their way to the parent: with the
    batch being loaded (``take_batch``), or alone (``flush``).

    Apart from the context, so that a worker's stream can hold it without holding the context
    that holds the stream (no reference cycle).
    """

    __slots__ = ("batch", "kept", "log", "slot", "worker_id")

    def __init__(
        self,
        worker_id: int | None = None,
        log: Any = None,
        slot: WorkerSlot | None = None,
        kept: list[dict[str, Any]] | None = None,
    ) -> None:
        self.worker_id = worker_id
        # The worker's event file; None in-process, where the parent is this process and reads
        # ``kept`` (``repair.take_in_process_events``).
        self.log = log
        self.slot = slot
        self.kept: list[dict[str, Any]] = [] if kept is None else kept
        # The events of the batch being loaded: they travel with that batch
        # (``sample_policy.HealedBatch``) and count when the user receives it, so a batch lost
        # with its worker and loaded again counts once.
        self.batch: list[dict[str, Any]] = []

    def record(self, event: dict[str, Any]) -> None:
        """A skip or replace decided in this worker, for the batch being loaded."""
        event["worker"] = self.worker_id
        self.batch.append(event)

    def take_batch(self) -> list[dict[str, Any]]:
        """The events of the batch just loaded, to travel with it."""
        events, self.batch = self.batch, []
        return events

    def flush(self) -> None:
        """Send the pending events alone: a stream's last items were skipped and no batch
        follows to carry them (the parent counts them from the event file, and a replay does not
        again)."""
        for event in self.take_batch():
            if self.log is None:
                self.kept.append(event)  # in-process loading: the parent is this process
                continue
            try:
                self.log.write(json.dumps(event, default=repr) + "\n")
                self.log.flush()
            except (OSError, ValueError):
                return
            if self.slot is not None:
                self.slot.event()


class Loading:
    """What changes while one worker loads: the batch in hand, the last sample that loaded, what
    healing learnt, the worker's stream. The one mutable part of a ``WorkerContext``; the
    wrappers change it only through these methods.
    """

    __slots__ = ("_resume", "good_structure", "indices", "known_bad", "last_loaded", "stream")

    def __init__(self, stream_resume: Any = None) -> None:
        # Of the batch being loaded, for the collate wrapper (tagged on an error)
        self.indices: list[Any] = []
        # The last index this worker loaded before the one in hand: beside an IndexError, where
        # the data really ends (a ``__len__`` past it)
        self.last_loaded: Any = None
        self.known_bad: set[Any] = set()  # samples that failed here (healing)
        self.good_structure: Any = None  # of a sample in a batch that collated (healing)
        # This worker's stream (its positions and keys, for the collate wrapper), set by the
        # dataset wrapper at each epoch
        self.stream: Any = None
        # IterableDataset, in a re-started worker: where the stream resumes
        # (``streams.StreamResume``), for its first epoch only
        self._resume = stream_resume

    def begin(self, indices: list[Any]) -> None:
        """A batch starts loading: these are its samples (the list may grow with ``add``)."""
        self.indices = indices

    def add(self, index: Any) -> None:
        """One more sample of the batch being loaded (fetched one at a time)."""
        self.indices.append(index)

    def loaded(self, index: Any) -> None:
        """``index`` loaded whole."""
        self.last_loaded = index

    def failed(self) -> None:
        """The batch in hand raised: nothing of it goes on to collate."""
        self.indices = []

    def take(self) -> list[Any]:
        """The batch's indices, for collating it; the next batch starts with none."""
        indices, self.indices = self.indices, []
        return indices

    def bad(self, index: Any) -> None:
        """``index`` failed in this worker: healing does not try it again here."""
        self.known_bad.add(index)

    def collated_like(self, structure: Any) -> None:
        """Samples of this structure collated together: the first one learnt stands."""
        if self.good_structure is None:
            self.good_structure = structure

    def open_stream(self, stream: Any) -> None:
        self.stream = stream

    def take_resume(self) -> Any:
        """Where a re-started worker's stream resumes: once, for its first epoch."""
        resume, self._resume = self._resume, None
        return resume


class WorkerContext:
    """One worker's identity (or one in-process iterator's, ``worker_id`` None), given to the
    wrappers it loads with: fixed for the worker's life, as torch's ``WorkerInfo`` is. What
    changes per batch is in ``loading``. Built fresh for each worker: it starts with nothing
    learned."""

    __slots__ = ("loading", "outbox", "quarantine", "slot", "stack_log", "worker_id")
    worker_id: int | None
    slot: WorkerSlot | None
    outbox: EventOutbox
    quarantine: QuarantineReader
    stack_log: Any
    loading: Loading

    def __init__(
        self,
        worker_id: int | None = None,
        slot: WorkerSlot | None = None,
        outbox: EventOutbox | None = None,
        quarantine: QuarantineReader = NO_LIVE_QUARANTINE,
        stream_resume: Any = None,
        stack_log: Any = None,
    ) -> None:
        fixed = object.__setattr__
        fixed(self, "worker_id", worker_id)
        fixed(self, "slot", slot)
        # The outbox is the worker's for its life; its event file is opened after the
        # worker's init has the context (``hooks.SupervisedWorkerInit``).
        fixed(self, "outbox", outbox if outbox is not None else EventOutbox(worker_id, slot=slot))
        # Samples quarantined since this worker's pool started (``live_quarantine``)
        fixed(self, "quarantine", quarantine)
        fixed(self, "stack_log", stack_log)  # faulthandler's file: open as long as the worker
        fixed(self, "loading", Loading(stream_resume))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"a worker's context is fixed for its life: {name} cannot be set "
            "(what changes per batch is in its loading)"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a worker's context is fixed for its life: {name} cannot be deleted")

    # A wrapper holding its placeholder context is pickled to spawned workers
    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)

    @classmethod
    def in_process(cls, kept: list[dict[str, Any]]) -> WorkerContext:
        """For loading in this process (``num_workers=0``): no worker, no recorder slot; its
        events go to ``kept``, which the parent reads."""
        return cls(outbox=EventOutbox(kept=kept))


def _failure(error: BaseException, index: Any, attempts: int, stage: str) -> dict[str, Any]:
    from loaderdoctor.supervise.exception_facts import exception_facts

    text = "".join(traceback.format_exception(error))
    return {
        "facts": exception_facts(error),  # a chain's root, a DecodingError's record
        "index": index,
        "stage": stage,
        "exception_type": type(error).__name__,
        "message": f"{type(error).__name__}: {error}",
        "traceback": text[-4000:],
        "errno": getattr(error, "errno", None),
        "attempts": attempts,
    }
