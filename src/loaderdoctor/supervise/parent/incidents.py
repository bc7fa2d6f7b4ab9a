"""What a supervised loader saw and did: an append-only log of incidents, and the report built on it.

``loader.report``, the ``INCIDENT_SINKS`` (``loaderdoctor run`` registers one) and ``loader.incidents``
all read this one log; nothing else records an incident. An incident is final once written (the
``Incident`` and ``FollowUp`` types, forensics.incident): what is learnt later is a follow-up the
log keeps beside it and merges when read.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from loaderdoctor.forensics.evidence import Diagnosis
from loaderdoctor.forensics.incident import HEALED_ACTIONS, LOSING_ACTIONS, FollowUp, Incident
from loaderdoctor.supervise.parent.ledger import Counts

logger = logging.getLogger(__name__)

# Callables told of every incident of every supervised loader in this process, as it happens:
# ``sink(loader, incident)``, and of every ``FollowUp`` to one, linked by the incident's ``id``.
# ``loaderdoctor run`` registers one that appends to the run's report; a sink that raises is
# logged and counted (``counts["sink_failures"]``), never raised: a report writer must not break
# training.
INCIDENT_SINKS: list[Callable[[Any, Incident | FollowUp], None]] = []
# An incident's ``id``: unique in this process image (``loaderdoctor run`` links by pid and image)
_incident_ids = itertools.count(1)


@dataclass(frozen=True)
class BackoffStep:
    """The loader moved down (after an environmental death) or back up (after a healthy stretch)."""

    direction: str  # "down" | "up"
    num_workers: int
    prefetch_factor: int
    epoch: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "direction": self.direction,
            "num_workers": self.num_workers,
            "prefetch_factor": self.prefetch_factor,
            "epoch": self.epoch,
            "reason": self.reason,
        }


# The log keeps this many incidents whole in memory; later ones in brief (no Python stack, no
# explanation or fixes, at most BRIEF_EVIDENCE_LINES of evidence), so a week-long job with
# thousands of healed incidents does not grow by each one's stack and text (about 10 KiB each).
# The sinks get every incident whole: under ``loaderdoctor run`` the report dir keeps them all.
KEPT_WHOLE = 200
BRIEF_EVIDENCE_LINES = 4


def _brief(diagnosis: Diagnosis) -> Diagnosis:
    evidence = diagnosis.evidence[:BRIEF_EVIDENCE_LINES]
    if len(diagnosis.evidence) > BRIEF_EVIDENCE_LINES:
        evidence.append(
            f"(kept in brief: {len(diagnosis.evidence) - BRIEF_EVIDENCE_LINES} more lines, the "
            f"stack and the fixes are left out after the first {KEPT_WHOLE} incidents)"
        )
    return dataclasses.replace(
        diagnosis,
        evidence=evidence,
        fixes=[],
        explanation="",
        python_stack=None,
        alternatives=[],
    )


class IncidentLog(Sequence[Incident]):
    """Append-only. ``owner`` is told to the sinks (a callable that returns the loader, or None)."""

    def __init__(self, owner: Callable[[], Any] = lambda: None) -> None:
        self._incidents: list[Incident] = []
        self._follow_ups: dict[int, list[FollowUp]] = {}  # incident id -> its follow-ups
        self._owner = owner
        self.steps: list[BackoffStep] = []
        self.quiet = False  # an isolated re-try made by healing: its parent reports the outcome
        self.sink_failures = 0
        self.loader: str | None = None  # where the loader was built (each incident names it)

    def append(self, diagnosis: Diagnosis, action: str) -> Incident:
        incident = Incident(diagnosis, action, self.loader, next(_incident_ids))
        if len(self._incidents) < KEPT_WHOLE:
            self._incidents.append(incident)
        else:
            brief = Incident(_brief(diagnosis), action, self.loader, incident.id)
            self._incidents.append(brief)
        self._tell_sinks(incident)
        return incident

    def follow_up(self, follow_up: FollowUp) -> None:
        """Link what was learnt to the incident ``follow_up.of`` (written before)."""
        self._follow_ups.setdefault(follow_up.of, []).append(follow_up)
        self._tell_sinks(follow_up)

    def _tell_sinks(self, record: Incident | FollowUp) -> None:
        if self.quiet:
            return
        owner = self._owner()
        for sink in list(INCIDENT_SINKS):
            try:
                sink(owner, record)
            except Exception:  # a report writer must never break the training loop
                self.sink_failures += 1
                logger.warning("loaderdoctor: incident sink %r failed", sink, exc_info=True)

    def _merged(self, incident: Incident) -> Incident:
        for follow_up in self._follow_ups.get(incident.id, ()):
            incident = follow_up.merged_into(incident)
        return incident

    def step(self, step: BackoffStep) -> None:
        self.steps.append(step)

    @overload
    def __getitem__(self, index: int) -> Incident: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Incident]: ...
    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._merged(incident) for incident in self._incidents[index]]
        return self._merged(self._incidents[index])

    def __len__(self) -> int:
        return len(self._incidents)

    def __iter__(self) -> Iterator[Incident]:
        return iter([self._merged(incident) for incident in self._incidents])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IncidentLog):
            return list(self) == list(other)
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"IncidentLog({list(self)!r})"


@dataclass
class LoaderReport:
    status: str  # "ok" | "healed" | "healed-with-loss" | "crashed"
    incidents: list[Incident]
    quarantine: list[int]
    delivered: dict[str, int]
    counts: dict[str, int]
    backoff: list[BackoffStep] = field(default_factory=list)
    # Whether workers and probes go before the training process when memory runs out
    # (``system.oom_priority``); None when no worker ran.
    oom_protection: str | None = None
    # Wrong data delivered without an error (``detectors.DataFinding.to_dict``), and each time
    # persistent workers were started anew, with why (``detectors.PersistentRestart``)
    data_findings: list[dict[str, Any]] = field(default_factory=list)
    persistent_restarts: list[dict[str, Any]] = field(default_factory=list)
    # feature -> why it was turned off for this loader (``containment``)
    features_off: dict[str, str] = field(default_factory=dict)

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text; ``to_dict()`` gives the dict."""
        return json.dumps(self.to_dict(), indent=indent)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "status": self.status,
            "incidents": [incident.to_dict() for incident in self.incidents],
            "quarantine": list(self.quarantine),
            "delivered": dict(self.delivered),
            "counts": dict(self.counts),
            "backoff": [step.to_dict() for step in self.backoff],
            "oom_protection": self.oom_protection,
            "data_findings": list(self.data_findings),
            "persistent_restarts": list(self.persistent_restarts),
            "features_off": dict(self.features_off),
        }


def build_report(log: IncidentLog, quarantine: list[int], counts: Counts) -> LoaderReport:
    incidents = list(log)
    actions = {i.action for i in incidents}
    if not incidents:
        status = "ok"
    elif actions <= HEALED_ACTIONS:
        status = "healed"
    elif actions <= HEALED_ACTIONS | LOSING_ACTIONS:
        status = "healed-with-loss"
    else:
        status = "crashed"
    return LoaderReport(
        status=status,
        incidents=incidents,
        quarantine=quarantine,
        delivered={"batches": counts.batches, "samples": counts.samples},
        counts={**counts.as_dict(), "sink_failures": log.sink_failures},
        backoff=list(log.steps),
    )


__all__ = [
    "HEALED_ACTIONS",
    "INCIDENT_SINKS",
    "LOSING_ACTIONS",
    "BackoffStep",
    "FollowUp",
    "Incident",
    "IncidentLog",
    "LoaderReport",
    "build_report",
]
