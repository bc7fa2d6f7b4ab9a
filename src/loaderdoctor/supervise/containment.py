"""A feature of the supervision turned off for one loader, because a protocol of the user's
objects or of their library did not behave as we call it.

Our machinery calls into the user's objects: a stream's ``state_dict()``/``load_state_dict()``
(torchdata's ``Stateful`` protocol), and more. Where such a call raises, the job must go on as
stock torch runs it: the feature that needed the call is turned off for that loader (a stream
then resumes by replay instead of from its state), the worker tells the parent in one event, and
the parent warns once and lists the feature, the loader and why in the report. The worker and
the parent share only the event's format, owned here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loaderdoctor import boundary

EVENT_KIND = boundary.FEATURE_OFF_EVENT

# feature id -> what turning it off means, said in the warning and the report
FEATURES = {
    "stream-state": (
        "streams resume by replaying their items, not from the dataset's state_dict() (a stream "
        "that cannot be replayed says so when it resumes)"
    ),
}


def event(feature: str, error: BaseException) -> dict[str, Any]:
    """The worker's message: ``feature`` is off, because calling into the user's code raised
    ``error``."""
    return {"kind": EVENT_KIND, "feature": feature, "reason": _one_line(error)}


def warning_text(feature: str, reason: str) -> str:
    return (
        f"loaderdoctor: {feature} turned off for this DataLoader: {reason}; "
        f"{FEATURES.get(feature, 'the rest of the supervision goes on')}"
    )


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


# Streams whose library coordinates the loader's workers among themselves, so that one worker
# cannot be replaced alone: healing declines at once, with the reason, rather than hang.
# MosaicML streaming's StreamingDataset partitions the epoch across all the workers of a loader in
# shared memory and makes each worker wait at a barrier that counts them all (its SharedBarrier)
# when it starts its stream. A replacement worker that restarts its stream waits there for
# workers that are past it: measured with streaming 0.13.0 (2 workers, one SIGKILLed at sample
# 50), the replacement hung until the hang watchdog killed it, and that worker's whole stream (96
# healthy samples) was lost. A library is named by the class and module that define the
# behaviour, matched along the dataset's MRO, so a user's subclass is found too.
# (module, class) -> why a dead worker's stream cannot be resumed alone
COORDINATED_STREAMS: dict[tuple[str, str], str] = {
    ("streaming.base.dataset", "StreamingDataset"): (
        "MosaicML streaming's StreamingDataset coordinates all the loader's workers in shared "
        "memory (a barrier each worker waits at when its stream starts, and the epoch's "
        "partition among them): a replacement worker cannot resume one stream alone (it would "
        "wait at that barrier for ever); MosaicML resumes a job from its own state_dict"
    ),
}


def listed(dataset: Any, table: Mapping[tuple[str, str], str]) -> str | None:
    """What ``table`` says of the first class along the dataset's MRO that it lists by
    (module, class), or None: a library is named by the class that defines the behaviour, so a
    user's subclass is found too. ``listed(dataset, COORDINATED_STREAMS)``: why a dead worker of
    a loader over ``dataset`` cannot be replaced alone."""
    for cls in type(dataset).__mro__:
        reason = table.get((cls.__module__, cls.__qualname__))
        if reason is not None:
            return reason
    return None


__all__ = [
    "COORDINATED_STREAMS",
    "EVENT_KIND",
    "FEATURES",
    "event",
    "listed",
    "warning_text",
]
