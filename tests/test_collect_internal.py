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


def test_an_oom_kill_logged_before_the_pool_started_was_of_a_reused_pid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pids are reused: the kernel log may hold an OOM kill of an earlier process that had this
    worker's pid. One logged well before the pool started is not this worker's; one after is."""
    from loaderdoctor.system import kmsg

    stale = (
        "[13117.706880] Memory cgroup out of memory: Killed process 4242 (pt_data_worker) "
        "total-vm:908760kB, anon-rss:403376kB"
    )
    fresh = stale.replace("13117.706880", "14500.250000")
    baseline = collect.Baseline(oom_kills=0, note=None, host_oom_kills=0, uptime_s=14500.0)
    for lines, oom in (([stale], False), ([stale, fresh], True)):
        monkeypatch.setattr(
            kmsg, "read_kernel_log", lambda lines=lines: kmsg.KernelLog(lines, True)
        )
        ev = Evidence(kind="death", pid=4242, signal="SIGKILL")
        collect.add_machine_evidence(ev, baseline)
        assert ev.oom_kill_for_pid is oom
        assert ev.kernel_log == ([fresh] if oom else [])
        assert (
            ev.notes.count(
                "the kernel log's OOM kill of pid 4242 at 13117.7 s after boot predates this pool "
                "(14500.0 s): it was of an earlier process with the same pid"
            )
            == 1
        )


def test_the_kernel_log_clock_is_read_from_its_lines_and_proc_uptime() -> None:
    from loaderdoctor.system import kmsg

    assert kmsg.seconds_of("[   12.500001] Out of memory: Killed process 1 (x)") == 12.500001
    assert kmsg.seconds_of("Out of memory: Killed process 1 (x)") is None
    uptime = kmsg.uptime_s()
    assert uptime is None or uptime > 0
