"""Evidence about the machine never carries loaderdoctor's own bug as a fact about the machine.

A probe of the machine that cannot read (an OSError) says the machine's reason; one that fails
inside loaderdoctor (any other exception: our bug) says internal-error, and logs the traceback.
"""

from __future__ import annotations

import logging

import pytest

from loaderdoctor.forensics import Evidence
from loaderdoctor.supervise.parent import collect
from loaderdoctor.system import cgroup, shm


def _raises(error: Exception):  # type: ignore[no-untyped-def]
    def probe(*args: object, **kwargs: object) -> object:
        raise error

    return probe


@pytest.mark.parametrize(
    ("error", "note"),
    [
        (
            PermissionError(13, "Permission denied"),
            "memory cgroup not readable: [Errno 13] Permission denied",
        ),
        (
            TypeError("'NoneType' object is not subscriptable"),
            "reading the memory cgroup failed inside loaderdoctor (internal-error, please report "
            "it): TypeError: 'NoneType' object is not subscriptable",
        ),
    ],
)
def test_a_failed_cgroup_read_says_whose_failure_it_is(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: Exception, note: str
) -> None:
    monkeypatch.setattr(cgroup, "memory_cgroup", _raises(error))
    ev = Evidence(kind="death", pid=None)
    with caplog.at_level(logging.ERROR, logger=collect.__name__):
        assert collect.read_baseline().note == note
        collect.add_machine_evidence(ev, None)
    assert note in ev.notes
    ours = isinstance(error, TypeError)
    assert [r.getMessage() for r in caplog.records] == (
        ["loaderdoctor: reading the memory cgroup failed"] * 2 * ours
    )


def test_a_failed_shm_read_inside_loaderdoctor_is_an_internal_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shm, "shm_usage", _raises(KeyError("total")))
    ev = Evidence(kind="death", pid=None)
    collect.add_machine_evidence(ev, None)
    assert ev.notes[-1] == (
        "reading /dev/shm failed inside loaderdoctor (internal-error, please report it): "
        "KeyError: 'total'"
    )
