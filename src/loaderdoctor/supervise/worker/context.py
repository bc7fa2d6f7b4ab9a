"""Per-process state of a DataLoader worker, and the skip/replace events it records for the parent.

One ``STATE`` per process: every worker-side wrapper reads and writes this same object.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from typing import Any

from loaderdoctor.recorder import WorkerSlot
from loaderdoctor.supervise.live_quarantine import NO_LIVE_QUARANTINE, QuarantineReader


class _WorkerState:
    """Per-process state, set in the worker by ``SupervisedWorkerInit``."""

    def __init__(self) -> None:
        self.slot: WorkerSlot | None = None
        self.worker_id: int | None = None
        self.batch_indices: list[Any] = []
        self.stack_log: Any = None
        self.event_log: Any = None
        self.events: list[dict[str, Any]] = []
        # The skip/replace events of the batch being loaded: they travel with that batch
        # (``sample_policy.HealedBatch``) and count when the user receives it, so a batch lost
        # with its worker and loaded again counts once (issue 24 item 3).
        self.batch_events: list[dict[str, Any]] = []
        self.known_bad: set[Any] = set()
        self.good_structure: Any = None  # of a sample in a batch that collated (healing)
        # votes of samples outside a batch: structure -> count (healing)
        self.reference_fetch: Callable[[list[Any]], dict[Any, int]] | None = None
        # IterableDataset: this worker's stream (its positions and keys, for the batch wrapper)
        # and, in a re-started worker, where the stream resumes (``streams.StreamResume``)
        self.stream: Any = None
        self.stream_resume: Any = None
        # Samples quarantined since this worker's pool started (``live_quarantine``)
        self.quarantine: QuarantineReader = NO_LIVE_QUARANTINE

    def begin(self, worker_id: int | None) -> None:
        """A fresh start for one worker, or one in-process iterator: nothing that an earlier
        loader of this process left behind carries over (a forked worker inherits all of it:
        a stale ``good_structure`` once named the wrong sample of a ragged batch)."""
        self.worker_id = worker_id
        self.batch_indices = []
        self.batch_events = []
        self.known_bad = set()
        self.good_structure = None
        self.reference_fetch = None
        self.stream = None
        self.stream_resume = None
        self.quarantine = NO_LIVE_QUARANTINE


STATE = _WorkerState()


def record_event(event: dict[str, Any]) -> None:
    """A skip or replace decided in this process, for the batch being loaded: it reaches the
    parent with that batch (``take_batch_events``), or alone (``flush_events``)."""
    event["worker"] = STATE.worker_id
    STATE.batch_events.append(event)


def take_batch_events() -> list[dict[str, Any]]:
    """The events of the batch just loaded, to travel with it."""
    events, STATE.batch_events = STATE.batch_events, []
    return events


def flush_events() -> None:
    """Send the pending events alone: a stream's last items were skipped and no batch follows
    to carry them (the parent counts them from the event file, and a replay does not again)."""
    for event in take_batch_events():
        if STATE.event_log is None:
            STATE.events.append(event)  # in-process loading: the parent is this process
            continue
        try:
            STATE.event_log.write(json.dumps(event, default=repr) + "\n")
            STATE.event_log.flush()
        except (OSError, ValueError):
            return
        if STATE.slot is not None:
            STATE.slot.event()


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
