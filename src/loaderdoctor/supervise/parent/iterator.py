"""torch's multiprocessing iterator, supervised: an adapter of torch's hooks onto the pool's
``Supervisor`` (``supervisor``), the supervision torchdata's iterator runs on too. A clean run takes
exactly torch's code path (same sampler draws, same seeds, same batches). Here too: the successor
a stopped pool hands over to.
"""

from __future__ import annotations

import functools
from typing import Any

from loaderdoctor import torch_compat
from loaderdoctor.supervise.parent.pool import kill_all
from loaderdoctor.supervise.parent.probe import probe_batch
from loaderdoctor.supervise.parent.recovery import Successor
from loaderdoctor.supervise.parent.single_process import SupervisedSingleProcessIter
from loaderdoctor.supervise.parent.start_failure import (
    fallback_overrides,
    loads_in_process,
    start_diagnosis,
    start_error,
)
from loaderdoctor.supervise.parent.supervision import LoaderSnapshot, Supervision
from loaderdoctor.supervise.parent.supervisor import SupervisedPool, Supervisor
from loaderdoctor.supervise.parent.watch import POLL_S
from loaderdoctor.supervise.streams import StreamProgress


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
        self._ld.books.stop_sigchld_checks()
        return True

    def _ld_start_failed(self, error: Exception) -> None:
        supervisor = self._ld
        books = supervisor.books
        books.stop_sigchld_checks()  # workers torch registered before it failed
        kill_all(books.started_workers())
        books.mark_shut_down()
        supervisor.cleanup()
        sup, snapshot = supervisor.sup, supervisor.snapshot
        diagnosis = start_diagnosis(error, snapshot, supervisor.start_method)
        if not loads_in_process(sup, diagnosis, supervisor.start_method):
            sup.record(diagnosis, "raised")
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
            self._ld.books.stop_sigchld_checks()
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


# Re-tries samples alone, each in a fresh supervised pool of its own
probe_alone = functools.partial(probe_batch, SupervisedMultiProcessingIter)

__all__ = ["POLL_S", "SupervisedMultiProcessingIter", "probe_alone", "successor_of"]
