"""One incident type from the supervisor to report.json: the loader's log appends an ``Incident``,
the sink writes its JSON form, ``run`` reads the same type back and the report holds it."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

import loaderdoctor
from loaderdoctor.forensics import Diagnosis
from loaderdoctor.forensics.incident import FollowUp, Incident, IncidentJSON
from loaderdoctor.jsonshape import ShapeError, check_shape
from loaderdoctor.runner import protocol
from loaderdoctor.runner.core import read_incidents
from loaderdoctor.runner.model import RunReport
from loaderdoctor.supervise.parent.incidents import IncidentLog

# The incident of DESIGN.md's run report: these keys may not change meaning
CONTRACT_KEYS = (
    "cause",
    "worker_id",
    "pid",
    "signal",
    "exit_code",
    "indices",
    "epoch",
    "batch",
    "action",
    "evidence",
    "fixes",
    "loader",
)


def whole_verdict() -> Diagnosis:
    return Diagnosis(
        "native-crash",
        "The worker crashed in native code",
        0.85,
        1,
        4242,
        "SIGSEGV",
        None,
        [21],
        ["the worker died of SIGSEGV", "sample 21 was in flight"],
        ["Look at the Python stack"],
        explanation="A C extension read memory it did not own.",
        sample_file="/data/21.jpg",
        batch=5,
        epoch=0,
        python_stack="File 'ds.py', line 3 in __getitem__",
        alternatives=[("shm-exhausted", 0.1)],
        docs="docs/causes/native-crash.md",
    )


def report_of(incidents: list[Incident]) -> RunReport:
    return RunReport(
        status="crashed",
        command=["python", "t.py"],
        exit_code=1,
        duration_s=1.0,
        incidents=incidents,
    )


def test_the_public_incident_is_the_one_the_report_holds() -> None:
    assert loaderdoctor.Incident is Incident
    assert typing.get_type_hints(RunReport)["incidents"] == list[Incident]


def test_an_incident_reaches_report_json_as_itself(tmp_path: Path) -> None:
    log = IncidentLog()
    log.loader = "train.py:12 (train_loader)"
    written = log.append(whole_verdict(), "quarantined")
    directory = protocol.incidents_dir(tmp_path)
    Path(directory).mkdir()
    line = {"time": 1012.5, "pid": 4000, "image": 0, "rank": 1, "id": written.id}
    protocol.append_incident(directory, 4000, {**line, "incident": written.to_dict()})

    (read,) = read_incidents(directory, started_wall=1000.0)
    assert type(read) is Incident
    assert read.diagnosis == written.diagnosis  # the whole verdict, alternatives and stack too
    assert (read.action, read.loader) == ("quarantined", "train.py:12 (train_loader)")
    assert (read.rank, read.process_pid, read.time_s) == (1, 4000, 12.5)

    text = report_of([read]).to_json()
    (entry,) = json.loads(text)["incidents"]
    assert entry["cause"] == "native-crash" and entry["indices"] == [21]
    assert set(CONTRACT_KEYS) <= set(entry)
    (back,) = RunReport.from_json(text).incidents
    assert back == read


def test_the_json_form_repeats_the_verdict_flat() -> None:
    incident = Incident(whole_verdict(), "raised", "train.py:3")
    data = incident.to_dict()
    assert list(data)[:2] == ["cause", "action"]
    assert data["diagnosis"] == whole_verdict().to_dict()
    for key in ("worker_id", "pid", "signal", "indices", "evidence", "fixes", "title", "docs"):
        assert data[key] == data["diagnosis"][key], key
    check_shape(json.loads(json.dumps(data)), IncidentJSON, "incident")
    assert Incident.from_dict(data) == incident


def test_a_report_changed_by_hand_reads_as_its_flat_fields() -> None:
    data = Incident(whole_verdict(), "raised").to_dict()
    data["evidence"] = ["a line the user wrote"]
    assert Incident.from_dict(data).evidence == ["a line the user wrote"]


def test_a_report_without_the_whole_verdict_still_reads() -> None:
    incident = Incident.from_dict({"cause": "oom-killed", "action": "raised", "diagnosis": None})
    assert (incident.cause, incident.indices, incident.evidence, incident.title) == (
        "oom-killed",
        [],
        [],
        "",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"evidence": 3}, "report.incidents[0].evidence: expected a list, got 3"),
        ({"cause": None}, "report.incidents[0].cause: expected text, got null"),
        ({"diagnosis": "x"}, "report.incidents[0].diagnosis"),
        ({"diagnosis": {"alternatives": 3}}, "incident.diagnosis.alternatives: expected a list"),
    ],
)
def test_a_damaged_incident_is_named_before_anything_reads_it(
    change: dict[str, object], message: str
) -> None:
    data = report_of([Incident(whole_verdict(), "raised")]).to_dict()
    data["incidents"][0].update(change)
    with pytest.raises(ShapeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        RunReport.from_dict(data)


def test_an_incident_without_its_cause_is_refused() -> None:
    data = report_of([Incident(whole_verdict(), "raised")]).to_dict()
    del data["incidents"][0]["cause"]
    with pytest.raises(ShapeError, match=r"report.incidents\[0\]: no 'cause'"):
        RunReport.from_dict(data)


def test_a_follow_up_merges_into_the_incident_it_names() -> None:
    incident = Incident(whole_verdict(), "skipped", id=7)
    merged = FollowUp(7, ("item #7 has key 's2-0007'",), "s2-0007").merged_into(incident)
    assert merged.key == "s2-0007" and merged.id == 7
    assert merged.evidence[-1] == "item #7 has key 's2-0007'"
    assert incident.evidence[-1] == "sample 21 was in flight"  # the written one is unchanged
    assert merged.action == "skipped"


def test_a_follow_up_that_learns_a_loss_turns_the_action_and_survives_its_json() -> None:
    incident = Incident(whole_verdict(), "respawned", id=7)
    said = "stream of worker 1 is not replayable: up to 44 items may be duplicated or lost"
    learnt = FollowUp.from_dict(
        json.loads(json.dumps(FollowUp(7, (said,), None, "lost").to_dict()))
    )
    merged = learnt.merged_into(incident)
    assert (merged.action, merged.evidence[-1]) == ("lost", said)
    assert FollowUp(7, (said,)).to_dict() == {"of": 7, "evidence": [said], "key": None}
