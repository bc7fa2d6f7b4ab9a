"""An incident: one failure a loader saw, its verdict and what was done about it.

One type carries it from the supervisor to ``report.json``: the loader's log appends it, the
incident sink writes ``to_dict()`` as one line, ``loaderdoctor run`` reads the line back with
``from_dict()`` and adds where and when (``rank``, ``process_pid``, ``time_s``, ``node``), and the
renderers read the same object. Its JSON form is flat (the DESIGN.md incident: ``cause``,
``indices``, ``action``, ``evidence``, ``fixes`` ...) with the whole verdict under ``diagnosis``;
``IncidentJSON`` is that form's shape.

An incident is final once written: what is learnt about it later (a stream culprit's key, read
when its stream resumes; a substitute that filled a quarantined sample's place) is a ``FollowUp``,
a record of its own that names the incident's ``id``, merged by whoever reads the two.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict

from loaderdoctor.forensics.evidence import Diagnosis
from loaderdoctor.jsonshape import check_shape

# Actions after which the loader carried on: the run is "healed", not "crashed".
HEALED_ACTIONS = frozenset(
    {"skipped", "replaced", "quarantined", "respawned", "backed-off", "fell-back"}
)
# The loader carried on, but healthy samples were lost (named in the incident's evidence and
# warning): a stream that cannot be read past an item that killed its worker twice, or one whose
# replay did not match what was delivered (learnt later: ``FollowUp.action``). The run is then
# "healed-with-loss", never plain "healed".
LOSING_ACTIONS = frozenset({"lost"})
# Every action after which the loader carried on
HEALING_ACTIONS = HEALED_ACTIONS | LOSING_ACTIONS


class _IncidentNeeds(TypedDict):
    # ``Required[...]`` is not seen under postponed annotations before Python 3.12: a total base
    cause: str
    action: str


class IncidentJSON(_IncidentNeeds, total=False):
    """The shape of ``Incident.to_dict()``: the verdict's fields a reader needs, flat, then the
    whole verdict; a report a user edited is checked against it before anything reads it."""

    worker_id: int | None
    pid: int | None
    signal: str | None
    exit_code: int | None
    indices: list[Any]
    position: int | None
    key: Any
    epoch: int | None
    batch: int | None
    evidence: list[str]
    fixes: list[str]
    title: str
    confidence: float | None
    sample_file: str | None
    shard: str | None
    docs: str
    rank: int | None
    process_pid: int | None
    time_s: float | None
    diagnosis: dict[str, Any] | None
    node: str | None
    loader: str | None


# The JSON form's keys, in the order it writes them, and those of them that are the verdict's
_KEYS = tuple(IncidentJSON.__annotations__)
_FLAT = tuple(name for name in _KEYS if name in {f.name for f in dataclasses.fields(Diagnosis)})
# What a verdict needs where a report written by hand (or by an older loaderdoctor) has only the
# flat fields
_UNSAID: dict[str, Any] = {
    "cause": "unknown",
    "title": "",
    "confidence": 0.0,
    "worker_id": None,
    "pid": None,
    "signal": None,
    "exit_code": None,
    "indices": [],
    "evidence": [],
    "fixes": [],
}


@dataclass
class Incident:
    """One failure seen by a loader and what was done about it."""

    diagnosis: Diagnosis
    # "raised"; healing adds skipped, replaced, quarantined, respawned, backed-off,
    # "fell-back" (loaderdoctor's own machinery failed: plain torch loading took over), and
    # "lost" (carried on, but the healthy samples its evidence names are lost).
    action: str
    # Where its loader was built, and the name the user's line gave it (``call_site``)
    loader: str | None = None
    # What its ``FollowUp`` records name (set by the log that writes it; unique in one process
    # image, so not part of the JSON form: the sink's line carries it beside)
    id: int = field(default=0, compare=False, repr=False)
    # Where and when, said by ``loaderdoctor run`` (None in the process that saw it): the rank and
    # the process whose loader saw it, seconds after the command started, and in a job report the
    # node folder whose run saw it
    rank: int | None = None
    process_pid: int | None = None
    time_s: float | None = None
    node: str | None = None

    JSON_FORM: ClassVar[type] = IncidentJSON

    @property
    def cause(self) -> str:
        return self.diagnosis.cause

    @property
    def title(self) -> str:
        return self.diagnosis.title

    @property
    def worker_id(self) -> int | None:
        return self.diagnosis.worker_id

    @property
    def pid(self) -> int | None:
        return self.diagnosis.pid

    @property
    def signal(self) -> str | None:
        return self.diagnosis.signal

    @property
    def exit_code(self) -> int | None:
        return self.diagnosis.exit_code

    @property
    def indices(self) -> list[Any]:
        return self.diagnosis.indices

    @property
    def position(self) -> int | None:
        return self.diagnosis.position

    @property
    def key(self) -> Any:
        return self.diagnosis.key

    @property
    def epoch(self) -> int | None:
        return self.diagnosis.epoch

    @property
    def batch(self) -> int | None:
        return self.diagnosis.batch

    @property
    def evidence(self) -> list[str]:
        return self.diagnosis.evidence

    @property
    def fixes(self) -> list[str]:
        return self.diagnosis.fixes

    @property
    def sample_file(self) -> str | None:
        return self.diagnosis.sample_file

    @property
    def shard(self) -> str | None:
        return self.diagnosis.shard

    @property
    def docs(self) -> str:
        return self.diagnosis.docs

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``IncidentJSON``): a line of run's incident log, an entry of
        ``report.json`` and of ``loader.report``."""
        verdict = self.diagnosis.to_dict()
        data = {name: verdict[name] if name in verdict else getattr(self, name) for name in _KEYS}
        data["diagnosis"] = verdict  # the verdict as data, not the object
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Incident:
        """Read back what :meth:`to_dict` wrote. Where the flat fields and the verdict differ
        (a report changed by hand), the flat fields are what a reader saw and win."""
        flat = {name: data[name] for name in _FLAT if name in data}
        values = {**_UNSAID, **(data.get("diagnosis") or {}), **flat}
        check_shape(values, Diagnosis, "incident.diagnosis")  # the verdict a renderer reads
        verdict = Diagnosis.from_dict(values)
        return cls(
            verdict,
            str(data.get("action", "raised")),
            loader=data.get("loader"),
            rank=data.get("rank"),
            process_pid=data.get("process_pid"),
            time_s=data.get("time_s"),
            node=data.get("node"),
        )


@dataclass(frozen=True)
class FollowUp:
    """What was learnt about incident ``of`` after it was written: evidence lines, the key of a
    stream's culprit (only where the incident named none), and the action it turned out to be
    (``lost``: the stream its death resumed was not replayed as delivered, so items may have
    been duplicated or lost, and the run is "healed-with-loss", never plain "healed")."""

    of: int
    evidence: tuple[str, ...] = ()
    key: Any = None
    action: str | None = None

    def merged_into(self, incident: Incident) -> Incident:
        d = incident.diagnosis
        key = d.key if d.key is not None or self.key is None else self.key
        merged = dataclasses.replace(d, key=key, evidence=[*d.evidence, *self.evidence])
        return dataclasses.replace(
            incident, diagnosis=merged, action=self.action or incident.action
        )

    def to_dict(self) -> dict[str, Any]:
        data = {"of": self.of, "evidence": list(self.evidence), "key": self.key}
        return {**data, "action": self.action} if self.action is not None else data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FollowUp:
        action = data.get("action")
        return cls(
            int(data["of"]),
            tuple(str(line) for line in data["evidence"]),
            data.get("key"),
            str(action) if action is not None else None,
        )


__all__ = [
    "HEALED_ACTIONS",
    "HEALING_ACTIONS",
    "LOSING_ACTIONS",
    "FollowUp",
    "Incident",
    "IncidentJSON",
]
