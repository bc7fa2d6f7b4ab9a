"""torch's multiprocessing iterator, supervised: an adapter of torch's hooks onto the pool's
``Supervisor`` (``supervisor``), the supervision torchdata's iterator runs on too. A clean run takes
exactly torch's code path (same sampler draws, same seeds, same batches). Here too: the successor
a stopped pool hands over to, and the re-try of samples alone, each in a fresh supervised pool of its
own (``probe_batch``), so that a sample that kills or hangs its worker again is named: ``Recovery``
asks it before it quarantines a sample (a death of the sample, not of the pool), for the control
that clears the rest, and to name the culprit of a batch loaded at once.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch

from loaderdoctor import torch_compat
from loaderdoctor.forensics import Diagnosis
from loaderdoctor.supervise.parent.controls import ProbeFailure
from loaderdoctor.supervise.parent.pool import kill_all
from loaderdoctor.supervise.parent.recovery import Successor
from loaderdoctor.supervise.parent.repair import record
from loaderdoctor.supervise.parent.single_process import SupervisedSingleProcessIter
from loaderdoctor.supervise.parent.start_failure import (
    fallback_overrides,
    loads_in_process,
    start_diagnosis,
    start_error,
)
from loaderdoctor.supervise.parent.supervision import LoaderSnapshot, Settings, Supervision
from loaderdoctor.supervise.parent.supervisor import SupervisedPool, Supervisor
from loaderdoctor.supervise.parent.watch import POLL_S
from loaderdoctor.supervise.streams import StreamProgress
from loaderdoctor.system.oom_priority import PROBE_OOM_SCORE_ADJ


class SupervisedMultiProcessingIter(SupervisedPool, torch_compat.HookedMultiProcessingIter):
    """torch's multiprocessing iterator with a watch on every worker."""

    def __init__(
        self,
        snapshot: LoaderSnapshot,
        supervision: Supervision,
        respawns: int = 0,
        streams: StreamProgress | None = None,
    ):
        self._ld_supervisor = Supervisor(
            self,
            snapshot,
            supervision,
            respawns,
            streams,
            successor=successor_of,
            probe=probe_alone,
        )
        if self._ld_start(self._ld.view(snapshot)):
            self._ld.watching()

    def _ld_start(self, view: LoaderSnapshot) -> bool:
        """torch's own __init__ starts the workers; False when they could not start."""
        try:
            with self._ld.bootstrapping():
                super().__init__(view)
        except Exception as error:  # torch's start: pickling the user's parts raises anything
            self._ld_start_failed(error)
            return False
        # At once: torch's __init__ has already sent the first indices, and a worker that dies
        # while its pid is still registered makes torch's SIGCHLD handler raise at whatever line
        # runs then (seen: inside another iterator's __del__, "Exception ignored in").
        self._ld.parts.books.stop_sigchld_checks()
        return True

    def _ld_start_failed(self, error: Exception) -> None:
        supervisor = self._ld
        books = supervisor.parts.books
        books.stop_sigchld_checks()  # workers torch registered before it failed
        kill_all(books.started_workers())
        books.mark_shut_down()
        supervisor.cleanup()
        sup, snapshot = supervisor.parts.sup, supervisor.parts.snapshot
        diagnosis = start_diagnosis(error, snapshot, supervisor.start_method)
        if not loads_in_process(sup, diagnosis, supervisor.start_method):
            record(sup, diagnosis, "raised")
            try:
                raise start_error(error, diagnosis)
            finally:
                error = None  # type: ignore[assignment]  # no cycle through the traceback
        forked = fallback_overrides(sup)
        supervisor.hand_over(
            SupervisedMultiProcessingIter(snapshot.with_overrides(**forked), sup)
            if forked
            else SupervisedSingleProcessIter(
                snapshot.with_overrides(num_workers=0, timeout=0, prefetch_factor=None), sup
            )
        )

    def ld_reset(self, loader: Any, first_iter: bool = False) -> None:
        if first_iter:
            # torch registered the new workers' pids for its SIGCHLD handler just before this
            # first reset, which sends their first indices: a worker killed meanwhile (load is
            # normal) must reach WorkerWatch as a death, not raise out of torch's __init__ as a
            # start failure.
            self._ld.parts.books.stop_sigchld_checks()
            super().ld_reset(loader, first_iter)
            return
        supervisor = self._ld
        supervisor.new_epoch()

        def reset() -> None:
            super(SupervisedMultiProcessingIter, self).ld_reset(loader, first_iter)

        supervisor.reset_persistent(reset)

    def ld_process_data(self, data: Any, worker_idx: int) -> Any:
        return super().ld_process_data(self._ld_received(data, worker_idx), worker_idx)


def successor_of(plan: Successor) -> Any:
    """The iterator that serves a stopped pool's owed batches and the rest of the epoch."""
    snapshot, num_workers = plan.snapshot, plan.snapshot.num_workers
    if plan.plain:
        if num_workers:
            return torch_compat.MultiProcessingIter(snapshot)
        return torch_compat.SingleProcessIter(snapshot)
    if num_workers == 0:
        return SupervisedSingleProcessIter(snapshot, plan.supervision)
    return SupervisedMultiProcessingIter(
        snapshot, plan.supervision, respawns=plan.respawns, streams=plan.streams
    )


logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 60.0


def probe_batch(
    pool: Callable[..., Any],
    snapshot: LoaderSnapshot,
    indices: list[Any],
    *,
    collate: bool = False,
) -> Any:
    """Load ``indices`` one by one, alone, in a fresh worker (of a supervised ``pool``): the
    first one that fails again, with its cause (None when all load). ``collate``: each is collated alone too,
    by the loader's ``collate_fn`` (a batch of one), as where a worker died collating.

    A string says why the probe itself could not tell (its worker could not start, or
    loaderdoctor's own machinery failed): logged, and never taken for the sample's failure,
    which would quarantine a healthy sample.
    """
    # each sample by ``dataset[index]``, so the recorder names it
    collated: dict[str, Any] = (
        {"batch_size": 1, "collate_fn": snapshot.collate_fn} if collate else {"batch_size": None}
    )
    loader = torch.utils.data.DataLoader(
        snapshot.dataset,
        **collated,
        sampler=indices,
        num_workers=1,
        worker_init_fn=snapshot.worker_init_fn,
        multiprocessing_context=snapshot.multiprocessing_context,
    )
    settings = Settings(
        hang_timeout=probe_timeout(snapshot),
        heal=False,
        on_error="raise",
        retries=0,
        quarantine_path=None,
        allow_in_process=False,
    )
    # The memory suspect goes first, before the workers and never after the training process.
    supervision = Supervision.of_probe(settings, snapshot.dataset, PROBE_OOM_SCORE_ADJ)
    try:
        for _ in pool(LoaderSnapshot(loader), supervision):
            pass
    except Exception as error:  # the probe's outcome, whatever it raised: read from its log
        for incident in supervision.log:
            found = [i for i in indices if _fails_at(incident.diagnosis, i)]
            if found:
                return ProbeFailure(found[0], incident.diagnosis.cause)
        what = f"sample {indices[0]!r}" if len(indices) == 1 else f"samples {indices!r}"
        logger.warning("loaderdoctor: %s could not be re-tried alone", what, exc_info=True)
        return f"{type(error).__name__}: {error}"
    return None


def probe_timeout(snapshot: LoaderSnapshot) -> float:
    """How long a re-try alone may stay on one sample: the loader's own hang_timeout, or the
    user's ``timeout``, where shorter (longer, the sample would fail the loader too: a re-try
    without the user's timeout found a slow sample "fine" and healing looped on it)."""
    limits = [PROBE_TIMEOUT_S]
    for name in ("hang_timeout", "timeout"):
        value = snapshot.__dict__.get(name)
        if isinstance(value, int | float) and value > 0:
            limits.append(float(value))
    return min(limits)


def _fails_at(diagnosis: Diagnosis, index: Any) -> bool:
    """The diagnosis is of the sample ``index`` failing (not of a worker that never reached it,
    nor of loaderdoctor's own machinery)."""
    if diagnosis.cause == "internal-error":
        return False
    try:
        return index in diagnosis.indices
    except (TypeError, ValueError):  # an index that does not compare (an array)
        return False


# Re-tries samples alone, each in a fresh supervised pool of its own
probe_alone = functools.partial(probe_batch, SupervisedMultiProcessingIter)

__all__ = [
    "POLL_S",
    "PROBE_TIMEOUT_S",
    "SupervisedMultiProcessingIter",
    "probe_alone",
    "probe_batch",
    "probe_timeout",
    "successor_of",
]
