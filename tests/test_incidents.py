"""The incident log: every incident reaches the sinks; a sink that fails is logged and counted."""

from __future__ import annotations

import logging

import pytest

from loaderdoctor.forensics import Diagnosis
from loaderdoctor.supervise.incidents import IncidentLog, build_report
from loaderdoctor.supervise.ledger import new_counts


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

    monkeypatch.setattr("loaderdoctor.supervise.incidents.INCIDENT_SINKS", [broken, working])
    log = IncidentLog()
    with caplog.at_level(logging.WARNING, logger="loaderdoctor.supervise.incidents"):
        log.append(verdict("native-crash"), "quarantined")
        log.append(verdict("sample-error"), "skipped")

    assert seen == ["native-crash", "sample-error"]  # a broken sink stops no other
    assert [r.getMessage() for r in caplog.records] == [
        f"loaderdoctor: incident sink {broken!r} failed"
    ] * 2
    assert caplog.records[0].exc_info is not None
    report = build_report(log, [3], new_counts())
    assert report.counts["sink_failures"] == 2
    assert report.to_json()["counts"]["sink_failures"] == 2


def test_a_quiet_log_tells_no_sink(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(
        "loaderdoctor.supervise.incidents.INCIDENT_SINKS",
        [lambda loader, incident: seen.append(incident.action)],
    )
    log = IncidentLog()
    log.quiet = True
    log.append(verdict("native-crash"), "raised")
    assert seen == [] and len(log) == 1
    assert build_report(log, [], new_counts()).counts["sink_failures"] == 0
