"""Rules that score evidence against the cause catalog.

Each rule looks at one kind of evidence and, when it applies, proposes a cause with a score and the
reasons for it. ``diagnose`` runs them all and keeps the best; the runners-up become
``Diagnosis.alternatives`` so a low-confidence verdict says what else it could be.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loaderdoctor.forensics.catalog import CAUSES
from loaderdoctor.forensics.error_text import error_text
from loaderdoctor.forensics.evidence import Diagnosis, Evidence
from loaderdoctor.forensics.facts import choose_fixes, facts_of

FATAL_NATIVE_SIGNALS = frozenset({"SIGSEGV", "SIGABRT", "SIGILL", "SIGFPE", "SIGSYS", "SIGTRAP"})
# Windows has no fatal signals: a process that crashes in native code ends with an NTSTATUS as
# its exit code, which multiprocessing reports as a large positive exitcode.
WINDOWS_CRASH_STATUSES = {
    0xC0000005: "STATUS_ACCESS_VIOLATION, the SIGSEGV of Windows",
    0xC000001D: "STATUS_ILLEGAL_INSTRUCTION",
    0xC0000094: "STATUS_INTEGER_DIVIDE_BY_ZERO",
    0xC00000FD: "STATUS_STACK_OVERFLOW",
    0xC0000409: "STATUS_STACK_BUFFER_OVERRUN, also how abort() ends a process",
}
# Below this much free space /dev/shm is "full" for the purpose of explaining a SIGBUS: one more
# batch of a typical size would not fit.
SHM_NEARLY_FULL_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Finding:
    cause: str
    score: float
    reasons: tuple[str, ...] = ()


Rule = Callable[[Evidence], "Finding | None"]

# Message signatures of the Python-level failures, as data: (cause, score, pattern).
MESSAGE_SIGNATURES: tuple[tuple[str, float, re.Pattern[str]], ...] = (
    (
        "shm-exhausted",
        0.95,
        re.compile(
            r"No space left on device|unable to allocate shared memory|"
            r"unable to write to file </torch_|insufficient shared memory|bus error",
            re.IGNORECASE,
        ),
    ),
    (
        "fd-exhausted",
        0.95,
        re.compile(r"Too many open files|\[Errno 24\]|received 0 items of ancdata"),
    ),
    ("cuda-in-worker", 0.98, re.compile(r"Cannot re-initialize CUDA in forked subprocess")),
    # Windows: ERROR_COMMITMENT_LIMIT while a spawned worker loads torch's DLLs.
    ("paging-file-too-small", 0.97, re.compile(r"WinError 1455|paging file is too small")),
    # macOS: an MPS tensor returned by a worker (pytorch/pytorch#87688), or the Objective-C
    # runtime's fork-safety abort in a forked child.
    (
        "mps-in-worker",
        0.95,
        re.compile(
            r"_share_filename_: only available on CPU|"
            r"may have been in progress in another thread when fork\(\) was called"
        ),
    ),
    # A thread is a task too: RLIMIT_NPROC and pids.max count it, and Python says this.
    ("process-limit", 0.9, re.compile(r"can't start new thread")),
    (
        "main-guard-missing",
        0.98,
        re.compile(
            r"before\s+the\s+current\s+process\s+has\s+finished\s+its\s+bootstrapping\s+phase"
        ),
    ),
    (
        "unpicklable",
        0.95,
        re.compile(
            r"Can't pickle|cannot pickle|Can't get attribute|PicklingError|"
            r"pickle .*local object|Can't get local object",
            re.IGNORECASE,
        ),
    ),
)


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


def internal_error(ev: Evidence) -> Finding | None:
    if ev.internal_origin is None:
        return None
    return Finding(
        "internal-error",
        0.99,
        (f"the exception was raised in loaderdoctor's own code: {ev.internal_origin}",),
    )


def exception_signature(ev: Evidence) -> Finding | None:
    if ev.kind not in ("exception", "start"):
        return None
    text = error_text(
        f"{ev.exception_type or ''}: {ev.exception_message or ''}\n{ev.traceback or ''}"
    )
    if ev.errno == 24:
        return Finding("fd-exhausted", 0.97, ("errno EMFILE (24): too many open files",))
    if ev.errno == 11 and ev.kind == "start":
        return Finding(
            "process-limit",
            0.95,
            ("starting a worker failed with errno EAGAIN (11): no more processes may start",),
        )
    if ev.errno == 28 and "shm" in text.lower():
        return Finding("shm-exhausted", 0.97, ("errno ENOSPC (28) on shared memory",))
    for cause, score, pattern in MESSAGE_SIGNATURES:
        match = pattern.search(text)
        if match:
            quoted = " ".join(match.group(0).split())  # one line, as the sentence it is
            return Finding(cause, score, (f"the error message says: {quoted!r}",))
    return None


def python_exception(ev: Evidence) -> Finding | None:
    if ev.kind != "exception":
        return None
    where = {
        "collate": ("collate-error", "raised in collate_fn"),
        "init": ("init-error", "raised in worker_init_fn"),
        "send": ("batch-lost", "raised while the worker sent a finished batch"),
    }.get(ev.stage or "", ("sample-error", "raised in Dataset.__getitem__ (or a transform)"))
    cause, reason = where
    return Finding(cause, 0.85, (f"{ev.exception_type}: {reason}",))


def start_failure(ev: Evidence) -> Finding | None:
    if ev.kind != "start":
        return None
    if ev.main_guard_missing and ev.main_script:
        return Finding(
            "main-guard-missing",
            0.97,
            (
                f"{ev.main_script} starts the epoch at the script's top level, outside "
                f'`if __name__ == "__main__":`: each {ev.start_method} worker would re-run the '
                "script first, training included",
            ),
        )
    if ev.unpicklable_parts:
        parts = ", ".join(ev.unpicklable_parts)
        reasons = [f"cannot be pickled for {ev.start_method}: {parts}"]
        if ev.unpicklable_path:
            kind = f" ({ev.unpicklable_type})" if ev.unpicklable_type else ""
            reasons.append(f"the object pickle refuses: {ev.unpicklable_path}{kind}")
        return Finding("unpicklable", 0.97, tuple(reasons))
    if ev.fileless_main_parts:
        parts = ", ".join(ev.fileless_main_parts)
        return Finding(
            "unpicklable",
            0.95,
            (
                f"defined in a __main__ that has no file (a notebook cell, python -c or stdin), "
                f"which a {ev.start_method} worker cannot import: {parts}",
            ),
        )
    return None


def oom_ruled_out(ev: Evidence) -> bool:
    """A SIGKILL that the kernel log and the cgroup counters, both read, show was no OOM kill:
    something outside killed the worker (a scheduler, a person, a watchdog)."""
    before, after = ev.cgroup_oom_kills_before, ev.cgroup_oom_kills_after
    return (
        ev.kind == "death"
        and ev.signal == "SIGKILL"
        and not ev.oom_kill_for_pid
        and bool(ev.kernel_log_readable)
        and before is not None
        and after is not None
        and after <= before
    )


def killed_by_sigkill(ev: Evidence) -> Finding | None:
    if ev.kind != "death" or ev.signal != "SIGKILL":
        return None
    if ev.oom_kill_for_pid:
        return Finding(
            "oom-killed", 0.98, ("the kernel log names this pid as killed by the OOM killer",)
        )
    before, after = ev.cgroup_oom_kills_before, ev.cgroup_oom_kills_after
    if before is not None and after is not None and after > before:
        return Finding(
            "oom-killed",
            0.85,
            (f"the memory cgroup's oom_kill counter went from {before} to {after} during the run",),
        )
    counters_known = before is not None and after is not None
    if oom_ruled_out(ev):
        return Finding(
            "killed-by-signal", 0.9, ("no OOM kill in the kernel log or the cgroup counters",)
        )
    if ev.kernel_log_readable or counters_known:
        return Finding("killed-by-signal", 0.75, ("no OOM kill found in what could be read",))
    return Finding(
        "killed-by-signal",
        0.5,
        (
            "neither the kernel log nor the cgroup OOM counters could be read: an OOM kill is possible",
        ),
    )


def oom_possible(ev: Evidence) -> Finding | None:
    """A SIGKILL is an OOM kill unless proven otherwise; keep it as the runner-up."""
    if ev.kind == "death" and ev.signal == "SIGKILL" and not ev.oom_kill_for_pid:
        return Finding("oom-killed", 0.4 if not ev.kernel_log_readable else 0.15)
    return None


def bus_error(ev: Evidence) -> Finding | None:
    if ev.kind != "death" or ev.signal != "SIGBUS":
        return None
    if ev.shm_free_bytes is not None and ev.shm_total_bytes:
        free, total = ev.shm_free_bytes, ev.shm_total_bytes
        if free < SHM_NEARLY_FULL_BYTES or free < total * 0.05:
            return Finding(
                "shm-exhausted",
                0.93,
                (f"SIGBUS while /dev/shm had {_mib(free)} free of {_mib(total)}",),
            )
        return Finding("native-crash", 0.7, (f"SIGBUS with /dev/shm not full ({_mib(free)} free)",))
    return Finding("shm-exhausted", 0.6, ("SIGBUS, the usual sign of a full /dev/shm",))


def fatal_signal(ev: Evidence) -> Finding | None:
    if ev.kind != "death" or ev.signal not in FATAL_NATIVE_SIGNALS:
        return None
    reasons = [f"the worker died of {ev.signal}, a fatal signal from native code"]
    if ev.python_stack:
        reasons.append("faulthandler captured the Python stack at the crash")
    return Finding("native-crash", 0.95, tuple(reasons))


def other_signal(ev: Evidence) -> Finding | None:
    if ev.kind != "death" or ev.signal is None:
        return None
    if ev.signal in FATAL_NATIVE_SIGNALS or ev.signal in ("SIGKILL", "SIGBUS"):
        return None
    return Finding("killed-by-signal", 0.9, (f"the worker received {ev.signal}",))


def exited(ev: Evidence) -> Finding | None:
    if ev.kind != "death" or ev.exit_code is None:
        return None
    if ev.exit_code in WINDOWS_CRASH_STATUSES:
        status = WINDOWS_CRASH_STATUSES[ev.exit_code]
        reasons = [f"the worker ended with Windows status 0x{ev.exit_code:08X} ({status})"]
        if ev.python_stack:
            reasons.append("faulthandler captured the Python stack at the crash")
        return Finding("native-crash", 0.95, tuple(reasons))
    if ev.bootstrap_marker:
        return Finding("main-guard-missing", 0.98, (ev.bootstrap_marker,))
    if ev.reached_worker_init is False:
        if ev.main_guard_missing:
            return Finding(
                "main-guard-missing",
                0.9,
                (
                    f"the worker exited with code {ev.exit_code} while starting under "
                    f"{ev.start_method}",
                    f"{ev.main_script} runs a DataLoader at top level without a main guard",
                ),
            )
        if ev.unpicklable_parts:
            parts = ", ".join(ev.unpicklable_parts)
            return Finding("unpicklable", 0.85, (f"cannot be unpickled in the worker: {parts}",))
        if ev.fileless_main_parts:
            parts = ", ".join(ev.fileless_main_parts)
            return Finding(
                "unpicklable",
                0.9,
                (
                    f"the worker exited with code {ev.exit_code} while starting under "
                    f"{ev.start_method}",
                    f"defined in a __main__ that has no file (a notebook cell, python -c or "
                    f"stdin), which a {ev.start_method} worker cannot import: {parts}",
                ),
            )
        return Finding(
            "worker-exit",
            0.6,
            (f"the worker exited with code {ev.exit_code} before it started loading",),
        )
    return Finding("worker-exit", 0.9, (f"the worker exited with code {ev.exit_code}",))


def hang(ev: Evidence) -> Finding | None:
    if ev.kind != "hang":
        return None
    seconds = ev.seconds_without_progress
    reason = f"no progress for {seconds:.1f} s" if seconds is not None else "no progress"
    return Finding("worker-hang", 0.95, (reason,))


RULES: tuple[Rule, ...] = (
    internal_error,
    exception_signature,
    python_exception,
    start_failure,
    killed_by_sigkill,
    oom_possible,
    bus_error,
    fatal_signal,
    other_signal,
    exited,
    hang,
)


def _describe_index(ev: Evidence) -> str | None:
    if ev.in_flight_index is not None:
        text = f"sample {ev.in_flight_index!r}"
    elif ev.iterable_position is not None:
        whose = f"worker {ev.worker_id}'s" if ev.worker_id is not None else "the worker's"
        text = f"item #{ev.iterable_position} of {whose} stream"
        if ev.stream_key is not None:
            text += f" (key {ev.stream_key!r})"
    else:
        return None
    if ev.sample_file:
        text += f" ({ev.sample_file})"
    if ev.sample_shard:
        text += f" in shard {ev.sample_shard}"
    if ev.stage:
        text += f", {ev.stage} stage"
    if ev.batch is not None:
        text += f", batch {ev.batch}"
    return "in flight: " + text


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")


def _exception_headline(exception_type: str, message: str) -> str:
    """``Type: message`` on one line. A message that quotes a traceback (torch's "Caught X in
    DataLoader worker process N") ends with the exception's own line: that one. Any other
    message's first paragraph, its lines joined (multiprocessing's bootstrapping error is an
    indented block whose last line is a URL)."""
    lines = [line.strip() for line in message.strip().splitlines()]
    raised = [line for line in lines if _EXCEPTION_LINE.match(line)]
    if raised:
        text = raised[-1]
    else:
        paragraph = " ".join(message.strip().split("\n\n")[0].split()) if lines else ""
        text = paragraph
    if text.endswith(f".{exception_type}"):  # the qualified name alone: no message
        text = exception_type
    if not text.startswith(exception_type):
        text = f"{exception_type}: {text}".rstrip(": ")
    return text


def evidence_lines(ev: Evidence) -> list[str]:
    """The facts behind a verdict, most telling first, as plain sentences."""
    lines: list[str] = []
    who = f"worker {ev.worker_id}" if ev.worker_id is not None else "the worker"
    if ev.pid is not None:
        who += f" (pid {ev.pid})"
    if ev.signal:
        lines.append(f"{who} was killed by {ev.signal}")
    elif ev.exit_code is not None:
        lines.append(f"{who} exited with code {ev.exit_code}")
    elif ev.exception_type:
        first = _exception_headline(ev.exception_type, ev.exception_message or "")
        lines.append(f"{who} raised {first}")
        if ev.root_exception:
            lines.append(f"root cause: {ev.root_exception}")
    if ev.exit_frame:
        lines.append(f"sys.exit() was called at {ev.exit_frame}")
    if ev.stage == "send" and ev.unpicklable_path:
        kind = f" ({ev.unpicklable_type})" if ev.unpicklable_type else ""
        lines.append(f"the object pickle refuses: {ev.unpicklable_path}{kind}")
    described = _describe_index(ev)
    if described:
        lines.append(described)
    if ev.odd_indices:
        lines.append(f"samples unlike the rest of the batch: {ev.odd_indices!r}")
    # A stream's batch has no indices (torch sends None for each item): its culprit is named
    # by position above.
    if (
        ev.batch_indices
        and len(ev.batch_indices) > 1
        and any(i is not None for i in ev.batch_indices)
    ):
        shown = ", ".join(repr(i) for i in ev.batch_indices[:16])
        more = "" if len(ev.batch_indices) <= 16 else f", … ({len(ev.batch_indices)} in all)"
        lines.append(f"batch indices: [{shown}{more}]")
    for line in ev.kernel_log[:4]:
        lines.append(f"kernel log: {line}")
    before, after = ev.cgroup_oom_kills_before, ev.cgroup_oom_kills_after
    if before is not None and after is not None:
        lines.append(f"memory cgroup oom_kill counter: {before} -> {after}")
    if ev.cgroup_limit_bytes is not None:
        lines.append(f"memory cgroup limit: {_mib(ev.cgroup_limit_bytes)}")
    if ev.worker_rss_bytes:
        lines.append(f"worker RSS at last report: {_mib(ev.worker_rss_bytes)}")
    if ev.shm_free_bytes is not None and ev.shm_total_bytes:
        lines.append(f"/dev/shm now: {_mib(ev.shm_free_bytes)} free of {_mib(ev.shm_total_bytes)}")
    lines.extend(ev.notes)
    if ev.internal_origin is not None and ev.traceback:
        lines.append("traceback (please include it in the report):")
        lines.extend(f"  {line}" for line in ev.traceback.strip().splitlines()[-30:])
    return lines


def diagnose(ev: Evidence) -> Diagnosis:
    findings = [f for f in (rule(ev) for rule in RULES) if f is not None]
    if not findings:
        findings = [Finding("worker-exit", 0.3, ("no rule matched the evidence",))]
    # Highest score wins; on a tie the earlier (more specific) rule wins.
    best = max(findings, key=lambda f: f.score)
    best_by_cause: dict[str, float] = {}
    for finding in findings:
        if finding.cause != best.cause:
            best_by_cause[finding.cause] = max(best_by_cause.get(finding.cause, 0.0), finding.score)
    cause = CAUSES[best.cause]
    # The culprits: the sample in flight; for collate, the odd samples (else the whole batch).
    indices: list[Any] = []
    if cause.id == "collate-error":
        indices = list(ev.odd_indices or ev.batch_indices or [])
    elif ev.in_flight_index is not None:
        indices = [ev.in_flight_index]
    return Diagnosis(
        cause=cause.id,
        title=cause.title,
        confidence=round(best.score, 2),
        worker_id=ev.worker_id,
        pid=ev.pid,
        signal=ev.signal,
        exit_code=ev.exit_code,
        indices=indices,
        position=ev.iterable_position,
        key=ev.stream_key,
        evidence=[*best.reasons, *evidence_lines(ev)],
        fixes=choose_fixes(cause, facts_of(ev)),
        explanation=cause.explanation,
        sample_file=ev.sample_file,
        shard=ev.sample_shard,
        batch=ev.batch,
        epoch=ev.epoch,
        python_stack=ev.python_stack,
        alternatives=sorted(best_by_cause.items(), key=lambda kv: -kv[1]),
        docs=cause.docs_url,
    )
