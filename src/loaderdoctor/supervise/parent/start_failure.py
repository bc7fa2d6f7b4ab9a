"""Workers that could not start: which part of the loader would not pickle, and what to raise."""

from __future__ import annotations

import errno
import multiprocessing
import sys
from typing import Any

from loaderdoctor.forensics import Diagnosis, Evidence, diagnose
from loaderdoctor.forensics.origin import format_traceback
from loaderdoctor.forensics.verdict_text import format_verdict
from loaderdoctor.supervise.errors import WorkerStartError, attach
from loaderdoctor.supervise.heal_policy import POLICY, ActionKind, Situation
from loaderdoctor.supervise.parent.repair import record
from loaderdoctor.supervise.pickle_path import unpicklable_path
from loaderdoctor.system.process_limits import process_limits


def start_diagnosis(error: BaseException, loader: Any, start_method: str) -> Diagnosis:
    ev = Evidence(
        kind="start",
        start_method=start_method,
        exception_type=type(error).__name__,
        exception_message=str(error),
        traceback=format_traceback(error),
        errno=getattr(error, "errno", None),
    )
    if ev.errno == errno.EAGAIN or "can't start new thread" in str(error):
        ev.notes.extend(process_limits())
    if start_method != "fork":
        ev.unpicklable_parts = unpicklable_parts(loader)
        found = unpicklable_object(loader)
        if found is not None:
            ev.unpicklable_path, ev.unpicklable_type = found
    return diagnose(ev)


def unguarded_diagnosis(main_line: str, start_method: str) -> Diagnosis:
    """The verdict on a main script whose top level starts an epoch without a main guard, found
    before any worker starts (``collect.unguarded_main_line``)."""
    return diagnose(
        Evidence(
            kind="start",
            start_method=start_method,
            main_script=main_line,
            main_guard_missing=True,
        )
    )


def loads_in_process(
    supervision: Any, diagnosis: Diagnosis, start_method: str | None = None
) -> bool:
    """Workers that cannot start (pickling, an unguarded main script, the process limit): True
    when healing goes on without them for the rest of the loader's life (the cause's catalog
    row says ``start-failure``: ``HealPolicy.decide``), said once: in forked workers where only
    spawn stood in the way (``supervision.fallback_start_method``), else in the main process
    (``supervision.workers_cannot_start``); False when the failure is the user's to see (the
    caller raises it)."""
    num_workers, prefetch_factor = supervision.base_settings
    action = POLICY.plan(
        diagnosis,
        Situation(
            heal=supervision.settings.heal,
            iterable=False,
            deaths_in_a_row=0,
            num_workers=num_workers,
            prefetch_factor=prefetch_factor,
            kind="start",
            fork_fallback=can_fork_instead(start_method),
        ),
    ).action
    if action.kind is not ActionKind.BACK_OFF:
        return False
    diagnosis.evidence.append(action.note)
    supervision.starts_workers_instead(action.start_method)
    if action.start_method is not None:
        where = (
            f"loading in {action.num_workers} forked worker process(es) "
            f"(multiprocessing_context={action.start_method!r})"
        )
    else:
        where = "loading in the main process (num_workers=0)"
    record(supervision, diagnosis, action.kind.value, where)
    return True


def can_fork_instead(start_method: str | None) -> bool:
    """Whether workers that cannot start under ``start_method`` may be forked instead: Linux
    only (macOS kills a forked child that touches Objective-C state; Windows has no fork)."""
    return (
        start_method is not None
        and start_method != "fork"
        and sys.platform.startswith("linux")
        and "fork" in multiprocessing.get_all_start_methods()
    )


def fallback_overrides(supervision: Any) -> dict[str, Any]:
    """What a pool's snapshot changes after workers could not start: the start method healing
    chose (``loads_in_process``), or nothing."""
    method = supervision.fallback_start_method
    if method is None:
        return {}
    return {"multiprocessing_context": multiprocessing.get_context(method)}


def fileless_main_diagnosis(parts: list[str], start_method: str) -> Diagnosis:
    """The verdict on a loader whose parts need a class or function of a ``__main__`` with no
    file (a notebook): each spawned worker would die unpickling them, found before any starts."""
    return diagnose(Evidence(kind="start", start_method=start_method, fileless_main_parts=parts))


def start_error(error: BaseException, diagnosis: Diagnosis) -> BaseException:
    """What the user catches: torch's own exception (AttributeError, PicklingError, ...) with the
    verdict attached; a RuntimeError becomes a ``WorkerStartError``, which is one."""
    verdict = format_verdict(diagnosis)
    if isinstance(error, RuntimeError) and not isinstance(error, WorkerStartError):
        wrapped = WorkerStartError(
            f"DataLoader workers could not start (RuntimeError: {error}).\n{verdict}", diagnosis
        )
        wrapped.__cause__ = error
        return wrapped
    attach(error, diagnosis)
    error.add_note(verdict)
    return error


def unpicklable_parts(loader: Any) -> list[str]:
    """Which of the worker's arguments cannot be pickled (what spawn/forkserver must send)."""
    from multiprocessing.reduction import ForkingPickler

    parts = []
    for name, value in (
        ("dataset", loader.dataset),
        ("collate_fn", loader.collate_fn),
        ("worker_init_fn", loader.worker_init_fn),
    ):
        if value is None:
            continue
        try:
            ForkingPickler.dumps(value)
        except Exception as error:  # a user's __reduce__ may raise anything: each names a part
            parts.append(f"{name} ({type(error).__name__}: {error})")
    return parts


def unpicklable_object(loader: Any) -> tuple[str, str] | None:
    """The path and type of the first object spawn cannot send (``dataset.transform.transforms[0]``,
    ``lambda``): what to make a module-level function."""
    from multiprocessing.reduction import ForkingPickler

    for name in ("dataset", "collate_fn", "worker_init_fn"):
        value = getattr(loader, name)
        if value is None:
            continue
        try:
            ForkingPickler.dumps(value)
        except Exception:  # pickle raises anything a __reduce__ raises
            return unpicklable_path(value, name, ForkingPickler.dumps)
    return None


__all__ = [
    "can_fork_instead",
    "fallback_overrides",
    "fileless_main_diagnosis",
    "loads_in_process",
    "start_diagnosis",
    "start_error",
    "unguarded_diagnosis",
    "unpicklable_object",
    "unpicklable_parts",
]
