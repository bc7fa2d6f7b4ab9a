"""torchdata's ``StatefulDataLoader``, supervised: an adapter of torchdata's iterator hooks onto the
pool's ``Supervisor``, as torch's iterator is (same wrapped workers, watch, ``Recovery``, policy).

A clean run takes torchdata's code path unchanged (same batches, order, seeds and ``state_dict``).
A stopped pool goes on from torchdata's own state at the last batch delivered, never with fewer
workers (the state records them): torchdata restores its own ``Stateful`` sampler exactly, but
fast-forwards any other over a new pass (for a random one, another order), so the resumed pool
draws on from the stopped one's sampler iterator instead; an IterableDataset's streams go on
from their positions, its culprit re-tried once as under ``DataLoader`` (``torchdata.resume``).
"""

from __future__ import annotations

import functools
import os
import weakref
from collections import deque
from typing import Any

from loaderdoctor import torch_compat, torchdata_compat  # torchdata_compat imports torchdata
from loaderdoctor.supervise.heal_policy import MAX_DEATHS_IN_A_ROW
from loaderdoctor.supervise.loader import (
    LOADER_HOOKS,
    DataLoader,
    _announce,
    _T_co,
    _warn_once,
    supervision_of_new,
)
from loaderdoctor.supervise.parent.iterator import probe_alone
from loaderdoctor.supervise.parent.supervision import LoaderSnapshot, Settings, Supervision
from loaderdoctor.supervise.parent.supervisor import (
    SupervisedPool,
    Supervisor,
    supervisor_of,
)
from loaderdoctor.supervise.streams import StreamProgress
from loaderdoctor.supervise.torchdata import resume
from loaderdoctor.supervise.torchdata.plain import plain_reason
from loaderdoctor.supervise.torchdata.sampler_tail import SamplerTail
from loaderdoctor.supervise.torchdata.streams import SnapshotPositions


class SupervisedStateful(torchdata_compat.HookedStatefulLoader):
    """What makes a ``StatefulDataLoader`` (or a subclass of it) supervised: mixed in before it.

    torchdata's ``__init__``, ``__iter__``, ``state_dict`` and ``load_state_dict`` run unchanged;
    only the multiprocessing iterator is the supervised one (``num_workers=0`` runs torchdata's).
    """

    def __init__(
        self,
        *args: Any,
        hang_timeout: float | None = None,
        heal: bool = False,
        on_error: str | None = None,
        retries: int | None = None,
        quarantine: str | os.PathLike[str] | None = None,
        allow_in_process: bool = False,
        max_skipped: int | float | None = None,
        max_deaths_in_a_row: int = MAX_DEATHS_IN_A_ROW,
        strict_data: bool | None = None,
        **kwargs: Any,
    ) -> None:
        settings = Settings.from_keywords(
            hang_timeout,
            heal,
            on_error,
            retries,
            quarantine,
            allow_in_process,
            max_skipped,
            max_deaths_in_a_row,
        )
        super().__init__(*args, **kwargs)
        loader: Any = self
        loader._ld = supervision_of_new(loader, settings, max_skipped, strict_data)
        loader._ld_unsupervised = plain_reason(loader)
        for hook in list(LOADER_HOOKS):
            hook(self)

    incidents = DataLoader.incidents
    report = DataLoader.report

    def ld_get_iterator(self) -> Any:
        loader: Any = self
        sup = loader._ld
        if loader._ld_unsupervised is not None:
            _warn_once(loader, loader._ld_unsupervised)
            return super().ld_get_iterator()
        loader.check_worker_number_rationality()
        snapshot = LoaderSnapshot(loader)
        if sup.backoff is not None:  # a heal lowered prefetch_factor (never num_workers)
            snapshot = snapshot.with_overrides(prefetch_factor=sup.backoff.prefetch_factor)
        iterator = SupervisedStatefulIter(snapshot, loader.next_iter_state, sup)
        loader.next_iter_state = None
        return iterator

    def __iter__(self) -> Any:
        loader: Any = self
        loader._ld_unsupervised = plain_reason(loader)  # before run's record reads it
        # torchdata starts a new iterator each epoch (unless persistent_workers): it takes the
        # prefetch_factor climbed back to
        _announce(loader._ld.epoch_started())
        current = loader.ld_iterator
        live = supervisor_of(current)  # the pool that serves: the last of a chain of successors
        while live is not None and live.successor is not None:
            live = supervisor_of(live.successor)
        if loader.persistent_workers and live is not None and live.recovery.idle_death():
            loader.ld_iterator = None
            torch_compat.shut_down(current)
        return super().__iter__()  # type: ignore[misc]


class StatefulDataLoader(SupervisedStateful, torchdata_compat.StatefulDataLoader[_T_co]):
    """A drop-in, supervised ``torchdata.stateful_dataloader.StatefulDataLoader``.

    Generic as torchdata's is: ``StatefulDataLoader[List[Tensor]]`` in an annotation, and
    ``class X(StatefulDataLoader[T])``.

    Takes every argument of torchdata's and behaves identically while nothing fails (same
    batches, order, seeds and ``state_dict``); the keyword-only extras of
    ``loaderdoctor.DataLoader`` (``hang_timeout``, ``heal``, ``on_error``, ``retries``,
    ``quarantine``, ``allow_in_process``) work as there.
    """


class SupervisedStatefulIter(SupervisedPool, torchdata_compat.HookedStatefulIter):
    """torchdata's multiprocessing iterator with a watch on every worker."""

    _ld_serves = 0  # 1 in a successor: it counts the batches it yields itself
    _ld_resumed_from: Any = None  # the state of a stream pool resumed after a death, until built

    def __init__(
        self,
        snapshot: LoaderSnapshot,
        next_iter_state: Any,
        supervision: Supervision,
        respawns: int = 0,
        sampler_tail: SamplerTail | None = None,
        streams: tuple[StreamProgress, dict[int, int]] | None = None,
    ) -> None:
        self._ld_supervisor = supervisor = Supervisor(
            self,
            snapshot,
            supervision,
            respawns,
            streams and streams[0],
            successor=functools.partial(resume.successor, SupervisedStatefulIter),
            probe=probe_alone,
            resume_point=functools.partial(resume.resume_point, weakref.ref(self)),
        )
        self._ld_sampler_tail = sampler_tail
        self._ld_positions = SnapshotPositions(*(streams or ()))
        # (sampler count after the draw, index batch) since the snapshot a state_dict resumes from
        self._ld_drawn: deque[tuple[int, Any]] = deque()
        supervisor.replaying = next_iter_state is not None
        # streams resumed after a death: one that dies again while torchdata resumes it goes on
        # again from where it began
        self._ld_resumed_from = next_iter_state if streams else None
        try:
            with supervisor.bootstrapping():
                # a worker may die or hang before the first batch
                fresh = self._ld_resumed_from is None
                built = supervisor.attempt(
                    functools.partial(super().__init__, supervisor.view(snapshot), next_iter_state),
                    building=fresh,
                    restart=functools.partial(
                        resume.restart_point, weakref.ref(self), next_iter_state, sampler_tail
                    ),
                )
                if streams and built is None:
                    torchdata_compat.count_fast_forward_once(self, next_iter_state)
        finally:
            self._ld_resumed_from = None
            supervisor.replaying = False
            self._ld_sampler_tail = None

    # --- bookkeeping of what each batch holds ----------------------------------------------
    def ld_restore_main_state(self, state_dict: Any) -> None:
        super().ld_restore_main_state(state_dict)
        tail = self._ld_sampler_tail
        if tail is not None:
            self.ld_sampler_iter = tail.after(self.ld_sampler_yielded, self.ld_sampler_iter)

    def ld_next_index(self) -> Any:
        index = super().ld_next_index()
        self._ld_drawn.append((self.ld_sampler_yielded, index))
        return index

    def ld_reset(self, loader: Any, first_iter: bool = False, prime_prefetch: bool = True) -> None:
        if not first_iter:
            self._ld_drawn.clear()
            self._ld.new_epoch()
            if self._ld.successor is not None:  # persistent workers: the successor's pool
                self._ld.successor.ld_reset(loader)
                self.ld_finished = False
                return
        else:
            # torchdata registered the new workers' pids for torch's SIGCHLD handler just before
            # this first reset, which waits for their start-up replies: a worker that dies
            # meanwhile must reach WorkerWatch as a death, not raise from the handler.
            self._ld.parts.books.stop_sigchld_checks()
            super().ld_reset(loader, first_iter, prime_prefetch)
            return
        # A worker that dies while torchdata's reset waits for its resume replies (one that died
        # idle before is found by the loader's ``__iter__``): the verdict, never a bare failure.
        # Nothing of the new epoch was delivered: a new pool starts it over.
        reset = functools.partial(super().ld_reset, loader, first_iter, prime_prefetch)
        self._ld.attempt(reset, building=True, restart=resume.epoch_start)

    def ld_process_data(self, data: Any, worker_id: int, state_dict: Any) -> Any:
        raw = data
        data = super().ld_process_data(self._ld_received(data, worker_id), worker_id, state_dict)
        self._ld_positions.processed(raw, self)
        kept_from = self.ld_snapshot_yielded  # draws up to the snapshot are never drawn again
        while self._ld_drawn and self._ld_drawn[0][0] <= kept_from:
            self._ld_drawn.popleft()
        return data

    def ld_next_data(self) -> Any:
        if self._ld_resumed_from is not None:  # torchdata's __init__ replays: a death leaves it
            return super(SupervisedPool, self).ld_next_data()
        data = super().ld_next_data()
        # a successor serves through the iterator it took over from, whose __next__ counts
        self.ld_num_yielded += self._ld_serves
        return data

    def state_dict(self) -> Any:
        supervisor = self._ld_supervisor  # torchdata may ask before its __init__ returned
        if supervisor is not None and supervisor.successor is not None:
            return supervisor.successor.state_dict()
        return super().state_dict()


__all__ = ["StatefulDataLoader", "SupervisedStateful", "SupervisedStatefulIter"]
