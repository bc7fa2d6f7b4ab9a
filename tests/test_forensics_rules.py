"""Unit tests of the rules: evidence in, verdict out. No processes, no machine."""

from __future__ import annotations

import pytest

from loaderdoctor.forensics import CAUSES, Evidence, catalog, diagnose

DESIGN_CAUSES = {
    "sample-error",
    "collate-error",
    "native-crash",
    "oom-killed",
    "shm-exhausted",
    "worker-hang",
    "worker-exit",
    "killed-by-signal",
    "unpicklable",
    "main-guard-missing",
    "fd-exhausted",
    "cuda-in-worker",
}


def test_catalog_has_every_design_cause_with_text() -> None:
    assert DESIGN_CAUSES <= set(CAUSES)
    for cause in CAUSES.values():
        assert cause.title and cause.explanation and cause.fixes and cause.symptoms, cause.id
        assert cause.docs_url.endswith(f"{cause.id}.md")


def test_every_cause_declares_how_it_heals() -> None:
    """A new row must say how healing treats it (an empty set: the user's to see), or healing
    would silently give it the default."""
    for cause in CAUSES.values():
        assert cause.heals is not None, f"{cause.id}: heals= is not declared"
        assert cause.heals <= catalog.HEAL_KINDS, cause.id


def test_heal_kinds_of_the_rows_are_what_the_policy_was_built_on() -> None:
    by_kind = {
        kind: {c.id for c in CAUSES.values() if kind in (c.heals or ())}
        for kind in catalog.HEAL_KINDS
    }
    assert by_kind == {
        catalog.ENVIRONMENTAL: {"oom-killed", "shm-exhausted", "killed-by-signal", "fd-exhausted"},
        catalog.SAMPLE_DEATH: {
            "native-crash",
            "oom-killed",
            "shm-exhausted",
            "worker-exit",
            "killed-by-signal",
        },
        catalog.PROCESS_KILLING: {"native-crash", "oom-killed", "killed-by-signal"},
        catalog.START_FAILURE: {
            "unpicklable",
            "main-guard-missing",
            "process-limit",
            "paging-file-too-small",
        },
    }


def death(**kw) -> Evidence:
    return Evidence(kind="death", worker_id=1, pid=4242, **kw)


@pytest.mark.parametrize(
    ("evidence", "cause", "min_confidence"),
    [
        (
            death(signal="SIGKILL", oom_kill_for_pid=True, kernel_log_readable=True),
            "oom-killed",
            0.95,
        ),
        (
            death(signal="SIGKILL", cgroup_oom_kills_before=0, cgroup_oom_kills_after=1),
            "oom-killed",
            0.8,
        ),
        (
            death(
                signal="SIGKILL",
                kernel_log_readable=True,
                cgroup_oom_kills_before=0,
                cgroup_oom_kills_after=0,
            ),
            "killed-by-signal",
            0.9,
        ),
        (death(signal="SIGSEGV"), "native-crash", 0.9),
        (death(signal="SIGABRT"), "native-crash", 0.9),
        (
            death(signal="SIGBUS", shm_total_bytes=64 << 20, shm_free_bytes=1 << 20),
            "shm-exhausted",
            0.9,
        ),
        (
            death(signal="SIGBUS", shm_total_bytes=64 << 30, shm_free_bytes=60 << 30),
            "native-crash",
            0.6,
        ),
        (death(signal="SIGTERM"), "killed-by-signal", 0.9),
        (death(exit_code=3, reached_worker_init=True), "worker-exit", 0.9),
        (
            death(exit_code=1, reached_worker_init=False, bootstrap_marker="re-ran train.py"),
            "main-guard-missing",
            0.95,
        ),
        (
            death(
                exit_code=1,
                reached_worker_init=False,
                main_guard_missing=True,
                main_script="train.py",
                start_method="spawn",
            ),
            "main-guard-missing",
            0.85,
        ),
        (Evidence(kind="hang", seconds_without_progress=12.0), "worker-hang", 0.9),
        (
            Evidence(
                kind="exception", stage="fetch", exception_type="ValueError", exception_message="x"
            ),
            "sample-error",
            0.8,
        ),
        (
            Evidence(
                kind="exception",
                stage="collate",
                exception_type="RuntimeError",
                exception_message="stack expects",
            ),
            "collate-error",
            0.8,
        ),
        (
            Evidence(
                kind="exception", stage="init", exception_type="KeyError", exception_message="k"
            ),
            "init-error",
            0.8,
        ),
        (
            Evidence(kind="exception", stage="fetch", exception_type="OSError", errno=24),
            "fd-exhausted",
            0.95,
        ),
        (
            Evidence(
                kind="exception",
                stage="collate",
                exception_type="RuntimeError",
                exception_message="RuntimeError: unable to allocate shared memory(shm) for file </torch_1_2_3>: No space left on device (28)",
            ),
            "shm-exhausted",
            0.9,
        ),
        (
            Evidence(
                kind="exception",
                stage="fetch",
                exception_type="RuntimeError",
                exception_message="RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method",
            ),
            "cuda-in-worker",
            0.95,
        ),
        (
            Evidence(
                kind="start",
                start_method="spawn",
                exception_type="OSError",
                exception_message='[WinError 1455] The paging file is too small for this operation to complete. Error loading "C:\\venv\\torch\\lib\\shm.dll" or one of its dependencies.',
            ),
            "paging-file-too-small",
            0.95,
        ),
        (
            Evidence(
                kind="exception",
                stage="fetch",
                exception_type="RuntimeError",
                exception_message="_share_filename_: only available on CPU",
            ),
            "mps-in-worker",
            0.95,
        ),
        (
            Evidence(
                kind="start",
                start_method="spawn",
                exception_type="AttributeError",
                exception_message="Can't pickle local object 'main.<locals>.<lambda>'",
                unpicklable_parts=["collate_fn (AttributeError: ...)"],
            ),
            "unpicklable",
            0.95,
        ),
        (
            Evidence(
                kind="start",
                exception_type="RuntimeError",
                exception_message="An attempt has been made to start a new process before the\n        current process has finished its bootstrapping phase.",
            ),
            "main-guard-missing",
            0.95,
        ),
    ],
)
def test_rule_verdicts(evidence: Evidence, cause: str, min_confidence: float) -> None:
    diagnosis = diagnose(evidence)
    assert diagnosis.cause == cause
    assert diagnosis.confidence >= min_confidence


def test_sigkill_without_readable_sources_is_uncertain_and_names_oom_as_alternative() -> None:
    diagnosis = diagnose(death(signal="SIGKILL", kernel_log_readable=False))
    assert diagnosis.cause == "killed-by-signal"
    assert diagnosis.confidence <= 0.5
    assert ("oom-killed", 0.4) in diagnosis.alternatives


def test_culprit_is_the_sample_in_flight_and_collate_names_the_odd_samples() -> None:
    assert diagnose(
        death(signal="SIGSEGV", in_flight_index=37, batch_indices=[36, 37])
    ).indices == [37]
    collate = Evidence(
        kind="exception",
        stage="collate",
        exception_type="RuntimeError",
        batch_indices=[4, 5, 6, 7],
        odd_indices=[6],
    )
    assert diagnose(collate).indices == [6]
    assert diagnose(death(exit_code=1, batch_indices=[0, 1])).indices == []


def test_evidence_and_diagnosis_round_trip_through_json() -> None:
    ev = death(signal="SIGKILL", in_flight_index=3, notes=["kernel log not readable: EPERM"])
    assert Evidence.from_dict(ev.to_dict()) == ev
    diagnosis = diagnose(ev)
    from loaderdoctor.forensics import Diagnosis

    assert Diagnosis.from_dict(diagnosis.to_dict()) == diagnosis


def test_a_multiline_start_error_is_one_readable_sentence_each() -> None:
    # multiprocessing's bootstrapping error is an indented block whose last line is a URL: on
    # main the evidence quoted '\n' inside a sentence and "raised RuntimeError:  section in ..."
    message = (
        "\n        An attempt has been made to start a new process before the\n"
        "        current process has finished its bootstrapping phase.\n\n"
        '        To fix this issue, refer to the "Safe importing of main module"\n'
        "        section in https://docs.python.org/3/library/multiprocessing.html\n        "
    )
    ev = Evidence(kind="start", start_method="spawn", exception_type="RuntimeError")
    ev.exception_message = message
    assert diagnose(ev).evidence == [
        "the error message says: 'before the current process has finished its bootstrapping phase'",
        "the worker raised RuntimeError: An attempt has been made to start a new "
        "process before the current process has finished its bootstrapping phase.",
    ]


def test_a_quoted_worker_traceback_is_named_by_its_last_exception_line() -> None:
    ev = Evidence(
        kind="exception",
        worker_id=1,
        exception_type="ValueError",
        exception_message=(
            "Caught ValueError in DataLoader worker process 1.\nOriginal Traceback (most recent "
            'call last):\n  File "x.py", line 3, in f\n    raise ValueError("corrupt")\n'
            "ValueError: corrupt"
        ),
    )
    assert diagnose(ev).evidence[1] == "worker 1 raised ValueError: corrupt"
