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

from typing import Any

EVENT_KIND = "feature-off"

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


__all__ = ["EVENT_KIND", "FEATURES", "event", "warning_text"]
