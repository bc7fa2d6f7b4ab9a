"""The incident log: every incident reaches the sinks; a sink that fails is logged and counted."""

from __future__ import annotations

import json
import logging

import pytest

from loaderdoctor.forensics import Diagnosis
from loaderdoctor.supervise.parent.incidents import IncidentLog, build_report
from loaderdoctor.supervise.parent.ledger import Counts


def verdict(cause: str) -> Diagnosis:
    return Diagnosis(cause, cause, 0.9, 0, 1, None, None, [3], [], [])


def test_a_failing_sink_is_logged_and_counted_not_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    def broken(loader: object, incident: object) -> None:
        raise OSError("disk full")

    def working(loader: object, incident: object) -> None:
        seen.append(incident.diagnosis.cause)  # type: ignore[attr-defined]

    monkeypatch.setattr("loaderdoctor.supervise.parent.incidents.INCIDENT_SINKS", [broken, working])
    log = IncidentLog()
    with caplog.at_level(logging.WARNING, logger="loaderdoctor.supervise.parent.incidents"):
        log.append(verdict("native-crash"), "quarantined")
        log.append(verdict("sample-error"), "skipped")

    assert seen == ["native-crash", "sample-error"]  # a broken sink stops no other
    assert [r.getMessage() for r in caplog.records] == [
        f"loaderdoctor: incident sink {broken!r} failed"
    ] * 2
    assert caplog.records[0].exc_info is not None
    report = build_report(log, [3], Counts())
    assert report.counts["sink_failures"] == 2
    assert report.to_dict()["counts"]["sink_failures"] == 2


def test_a_quiet_log_tells_no_sink(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(
        "loaderdoctor.supervise.parent.incidents.INCIDENT_SINKS",
        [lambda loader, incident: seen.append(incident.action)],
    )
    log = IncidentLog()
    log.quiet = True
    log.append(verdict("native-crash"), "raised")
    assert seen == [] and len(log) == 1
    assert build_report(log, [], Counts()).counts["sink_failures"] == 0


def test_to_json_is_json_text_and_to_dict_the_dict() -> None:
    """`print(loader.report.to_json())` (the README's line) prints JSON, not a Python dict."""
    log = IncidentLog()
    log.append(verdict("sample-error"), "skipped")
    report = build_report(log, [3], Counts())

    text = report.to_json()

    assert isinstance(text, str)
    assert json.loads(text) == report.to_dict()
    assert text.startswith('{\n  "schema": 1,\n  "status": "healed",')
    assert json.loads(report.to_json(indent=None)) == report.to_dict()


def test_a_diagnosis_reads_back_what_to_json_wrote() -> None:
    diagnosis = verdict("native-crash")
    assert Diagnosis.from_json(diagnosis.to_json()) == diagnosis


@pytest.mark.parametrize(
    ("actions", "status"),
    [
        ([], "ok"),
        (["skipped", "respawned"], "healed"),
        (["respawned", "lost"], "healed-with-loss"),  # never plain "healed"
        (["lost", "raised"], "crashed"),
    ],
)
def test_the_status_says_when_healing_lost_samples(actions: list[str], status: str) -> None:
    log = IncidentLog()
    for action in actions:
        log.append(verdict("killed-by-signal"), action)
    assert build_report(log, [], Counts()).status == status


def test_the_typed_counts_make_the_reports_counts_unchanged() -> None:
    """``Counts`` is a dataclass inside; the report's ``counts`` keeps its keys and their order
    (shared/DESIGN.md's report schema)."""
    counts = Counts(batches=3, samples=12, skipped=1)
    report = build_report(IncidentLog(lambda: None), [], counts)
    assert list(report.to_dict()["counts"].items()) == [
        ("batches", 3),
        ("samples", 12),
        ("skipped", 1),
        ("replaced", 0),
        ("resent_batches", 0),
        ("probe_failures", 0),
        ("sink_failures", 0),
    ]
    assert report.delivered == {"batches": 3, "samples": 12}


def test_the_log_keeps_later_incidents_in_brief_and_the_sinks_whole() -> None:
    from loaderdoctor.forensics import Diagnosis
    from loaderdoctor.supervise.parent import incidents as incidents_module

    seen: list[incidents_module.Incident] = []
    incidents_module.INCIDENT_SINKS.append(lambda owner, incident: seen.append(incident))
    try:
        log = incidents_module.IncidentLog()
        evidence = [f"line {i}" for i in range(6)]
        for _ in range(incidents_module.KEPT_WHOLE + 1):
            log.append(
                Diagnosis(
                    "native-crash",
                    "t",
                    0.9,
                    0,
                    1,
                    None,
                    None,
                    [3],
                    list(evidence),
                    ["fix"],
                    python_stack="stack",
                ),
                "quarantined",
            )
    finally:
        incidents_module.INCIDENT_SINKS.pop()
    whole, brief = log[0].diagnosis, log[-1].diagnosis
    assert (whole.python_stack, whole.evidence, whole.fixes) == ("stack", evidence, ["fix"])
    assert (brief.python_stack, brief.fixes, brief.indices) == (None, [], [3])
    assert brief.evidence == [
        "line 0",
        "line 1",
        "line 2",
        "line 3",
        "(kept in brief: 2 more lines, the stack and the fixes are left out after the first "
        "200 incidents)",
    ]
    assert seen[-1].diagnosis.python_stack == "stack"  # the sinks get it whole
