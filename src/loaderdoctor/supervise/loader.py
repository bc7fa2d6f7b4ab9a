"""``loaderdoctor.DataLoader``: a drop-in, supervised ``torch.utils.data.DataLoader``."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import torch.utils.data

from loaderdoctor import torch_compat, torch_signature
from loaderdoctor.call_site import loader_site
from loaderdoctor.supervise.heal import user_stacklevel
from loaderdoctor.supervise.heal_policy import MAX_DEATHS_IN_A_ROW
from loaderdoctor.supervise.parent.incidents import (
    INCIDENT_SINKS,
    Incident,
    IncidentLog,
    LoaderReport,
)
from loaderdoctor.supervise.parent.supervision import (
    IterState,
    LoaderSnapshot,
    Settings,
    Supervision,
)

if TYPE_CHECKING:  # a default (PEP 696) lets `loader = DataLoader(obj)` infer DataLoader[Any]
    from typing_extensions import TypeVar as _TypeVar

    _T_co = _TypeVar("_T_co", covariant=True, default=Any)
else:
    _T_co = TypeVar("_T_co", covariant=True)

# The keywords of torch.utils.data.DataLoader that the supervision knows how to work with. A
# keyword of a newer torch outside this set reaches torch unchanged, and the loader runs as plain
# torch (one warning): supervising what it does not know could change what it does.
KNOWN_TORCH_KEYWORDS = torch_signature.ALL

# Callables told of every supervised loader as it is built: ``hook(loader)``. ``loaderdoctor run``
# registers one that watches the loader's own records (``loader._ld``: its delivered counts,
# worker pids and incident log), whether the loader came from torch's name or from ours.
LOADER_HOOKS: list[Callable[[Any], None]] = []


class DataLoader(torch_compat.HookedDataLoader[_T_co]):
    """A ``torch.utils.data.DataLoader`` whose every worker failure gets a verdict.

    Takes every argument of ``torch.utils.data.DataLoader`` and behaves identically while nothing
    fails (same batches, same order, same seeds). When a worker raises, crashes, is killed or
    hangs, the exception raised from ``next()`` names the cause, the sample in flight, the evidence
    and the fix, with the ``Diagnosis`` attached as ``error.diagnosis``. The exception has the
    type torch would raise.

    Keyword-only extras:
        hang_timeout: seconds without progress on one sample (or collate) after which the worker's
            Python stack is dumped, the worker is killed and ``WorkerHangError`` is raised.
            ``None`` (default) disables the watchdog.
        heal, on_error, retries, quarantine: healing (see the README).
        allow_in_process: let healing's back-off load samples in this process after a cause that
            killed a worker process (default False: at least one worker process stays, so a
            sample that kills its process cannot kill the training).
        max_skipped: how many samples healing may skip before it stops and raises, as a count
            or a fraction of the dataset (default 0.5). The same failure on eight samples in a
            row, with none delivered between, stops it too: a failure the samples share.
        max_deaths_in_a_row: how many worker deaths (or hangs) in a row, with no batch delivered
            between and no sample to blame, healing replaces before it stops and raises
            ``HealingStoppedError`` (default 8). A sample that kills its worker again alone is
            quarantined instead, and counts against ``max_skipped``.
        strict_data: raise ``DataError`` instead of warning ``DataWarning`` when the loader
            delivers wrong data without an error (a stream duplicated in every worker, the same
            shuffle every epoch, persistent workers with stale dataset attributes, random
            generators cloned into every worker). Default: the ``LOADERDOCTOR_STRICT_DATA``
            environment variable (``loaderdoctor run --strict`` sets it).

    Any other keyword reaches torch unchanged.
    """

    def __init__(
        self,
        dataset: torch.utils.data.Dataset[_T_co] | Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Any = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Any = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        hang_timeout: float | None = None,
        heal: bool = False,
        on_error: str | None = None,
        retries: int | None = None,
        quarantine: str | os.PathLike[str] | None = None,
        allow_in_process: bool = False,
        max_skipped: int | float | None = None,
        max_deaths_in_a_row: int = MAX_DEATHS_IN_A_ROW,
        strict_data: bool | None = None,
        **torch_keywords: Any,
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
        # torch's own keywords (and any a newer torch adds) go to torch as given: torch checks
        # them and raises its own TypeError for one it does not know.
        super().__init__(
            dataset,
            batch_size,
            shuffle,
            sampler,
            batch_sampler,
            num_workers,
            collate_fn,
            pin_memory,
            drop_last,
            timeout,
            worker_init_fn,
            multiprocessing_context,
            generator,
            **torch_keywords,
        )
        self._ld = supervision_of_new(self, settings, max_skipped, strict_data)
        self._ld_built(sorted(set(torch_keywords) - KNOWN_TORCH_KEYWORDS))

    def _ld_built(self, unknown_keywords: list[str]) -> None:
        """What is supervised of the loader just built, and the hooks told of it."""
        self._ld_unsupervised = _unsupervised_reason(unknown_keywords)
        # A class that overrides ``_get_iterator``: supervised only if its override reaches ours
        # (``super()._get_iterator()``), which its first iterator tells
        self._ld_own_iterator = own_iterator_reason(type(self))
        self._ld_reached = False
        for hook in list(LOADER_HOOKS):
            hook(self)

    @property
    def incidents(self) -> IncidentLog:
        """Every incident so far, in order (append-only; ``report`` reads the same log)."""
        return self._ld.log

    def ld_get_iterator(self) -> Any:
        from loaderdoctor.supervise.worker import hooks as worker_hooks

        self._ld_reached = True
        sup = self._ld
        if self._ld_unsupervised is not None or sup.plain_torch:
            if self._ld_unsupervised is not None:
                _warn_once(self, self._ld_unsupervised)
            return super().ld_get_iterator()
        if worker_hooks.is_spawn_bootstrapping():
            # A spawned worker re-running an unguarded main script reached this loop. It must
            # never heal by loading here (it would run the user's training in the worker): it
            # fails as under stock torch, and the parent, told by the marker, gives the verdict.
            worker_hooks.write_bootstrap_marker()
            return super().ld_get_iterator()
        from loaderdoctor.supervise.parent.iterator import SupervisedMultiProcessingIter
        from loaderdoctor.supervise.parent.single_process import SupervisedSingleProcessIter

        workers, prefetch = self.num_workers, self.prefetch_factor
        foreseen = sup.workers_cannot_start or sup.fallback_start_method is not None
        if workers and not foreseen and sup.settings.heal:
            _foreseen_start_failure(self, sup)
        if sup.workers_cannot_start:
            workers = 0
        elif sup.backoff is not None:
            workers, prefetch = sup.backoff.num_workers, sup.backoff.prefetch_factor
        if workers == 0:
            overrides: dict[str, Any] = {}
            if self.num_workers:  # backed off to in-process loading
                overrides = {"num_workers": 0, "timeout": 0, "prefetch_factor": None}
            return SupervisedSingleProcessIter(LoaderSnapshot(self, **overrides), sup)
        self.check_worker_number_rationality()
        from loaderdoctor.supervise.parent.start_failure import fallback_overrides

        snapshot = LoaderSnapshot(
            self, num_workers=workers, prefetch_factor=prefetch, **fallback_overrides(sup)
        )
        return SupervisedMultiProcessingIter(snapshot, sup)

    def __iter__(self) -> Any:
        sup = self._ld
        step = sup.epoch_started()
        if self._ld_unsupervised is not None or sup.plain_torch:
            if self._ld_unsupervised is not None:
                _warn_once(self, self._ld_unsupervised, stacklevel=user_stacklevel())
            return super().__iter__()
        climbed = _announce(step)
        current = self.ld_iterator
        from loaderdoctor.supervise.parent.supervisor import supervisor_of  # psutil: lazily

        supervisor = supervisor_of(current)
        state = supervisor.state if supervisor is not None else IterState.RUNNING
        if current is not None and (climbed or state is not IterState.RUNNING):
            # Persistent workers died with the last epoch, healing moved loading elsewhere, or
            # the loader climbs back up: start afresh, never resume such an iterator (stock
            # torch would hang or lose the dead worker's batches).
            sup.data.persistent_restarted(
                "the loader climbs back up after a back-off"
                if climbed
                else "the last epoch's pool failed or handed its loading over (healing)"
            )
            self.ld_iterator = None
            torch_compat.shut_down(current)
        workers = sup.backoff.num_workers if sup.backoff is not None else self.num_workers
        if self.persistent_workers and (workers == 0 or sup.workers_cannot_start):
            return self.ld_get_iterator()
        if self._ld_own_iterator is not None:
            return self._first_iterator_of_own_class(self._ld_own_iterator)
        return super().__iter__()

    def _first_iterator_of_own_class(self, reason: str) -> Any:
        """The first iterator of a class that overrides ``_get_iterator``: where the override
        never reached ours, the loader runs as plain torch from now on, said once."""
        self._ld_own_iterator = None
        self._ld_reached = False
        iterator = super().__iter__()
        if not self._ld_reached:
            self._ld_unsupervised = reason
            self._ld.tell_watchers("unsupervised")  # ``run`` records it now, while it lives
            _warn_once(self, reason, stacklevel=user_stacklevel())
        return iterator

    @property
    def report(self) -> LoaderReport:
        """What this loader saw and did: incidents with their actions, quarantine, counts."""
        from loaderdoctor.supervise.parent.repair import take_in_process_events
        from loaderdoctor.supervise.parent.supervisor import supervisor_of

        supervisor = supervisor_of(self.ld_iterator)
        if supervisor is not None:
            supervisor.drain()
        take_in_process_events(self._ld)
        return self._ld.report()


def supervision_of_new(
    loader: Any, settings: Settings, max_skipped: int | float | None, strict_data: bool | None
) -> Supervision:
    """The supervision of a loader just built, ``DataLoader`` or ``StatefulDataLoader`` alike;
    its keyword-only extras become its attributes, as given (a probe reads its
    ``hang_timeout``)."""
    loader.hang_timeout = settings.hang_timeout
    loader.heal = settings.heal
    loader.on_error = settings.on_error
    loader.retries = settings.retries
    loader.quarantine_path = settings.quarantine_path
    loader.allow_in_process = settings.allow_in_process
    loader.max_skipped = max_skipped
    loader.max_deaths_in_a_row = settings.max_deaths_in_a_row
    supervision = Supervision.of(loader, settings)
    supervision.log.loader = loader_site()
    if strict_data is not None:
        supervision.data.strict = strict_data
    return supervision


def _foreseen_start_failure(loader: DataLoader, sup: Supervision) -> None:
    """Before any worker starts, the start failures the main process can foresee under spawn
    or forkserver, healed like the others (loading in the main process, once, loudly): a worker
    would re-run the main script's top level, and when that starts this epoch outside a main
    guard each worker would run the training itself; or the loader's parts need a class of a
    ``__main__`` with no file (a notebook), which no worker can import."""
    from loaderdoctor.supervise.parent import collect
    from loaderdoctor.supervise.parent.start_failure import (
        fileless_main_diagnosis,
        loads_in_process,
        unguarded_diagnosis,
    )

    method = torch_compat.start_method_of(loader)
    if method == "fork":
        return
    unguarded = collect.unguarded_main_line()
    if unguarded is not None:
        loads_in_process(sup, unguarded_diagnosis(unguarded, method), method)
        return
    parts = (
        ("dataset", loader.dataset),
        ("collate_fn", loader.collate_fn),
        ("worker_init_fn", loader.worker_init_fn),
    )
    fileless = collect.defined_in_fileless_main(parts)
    if fileless:
        loads_in_process(sup, fileless_main_diagnosis(fileless, method), method)


def own_iterator_reason(cls: type) -> str | None:
    """Why a loader of ``cls`` runs unsupervised: a class that overrides torch's
    ``_get_iterator`` (litdata's ``StreamingDataLoader``) builds an iterator of its own, whose
    workers never run under our hooks. None when torch's hook is ours."""
    owner = torch_compat.own_iterator_class(cls)
    if owner is None:
        return None
    return (
        f"{owner.__module__}.{owner.__qualname__} overrides DataLoader._get_iterator and builds "
        "its own iterator: its workers run without loaderdoctor's hooks (a worker death there is "
        "torch's own error) and its batches are not counted; this DataLoader runs as plain "
        "torch, unsupervised."
    )


def _unsupervised_reason(unknown: list[str]) -> str | None:
    if not torch_compat.SUPPORTED:
        return (
            f"loaderdoctor supports torch {torch_compat.SUPPORTED_RANGE}, this is torch "
            f"{torch_compat.TORCH_VERSION}: this DataLoader runs as plain torch, unsupervised."
        )
    if unknown:
        return (
            f"loaderdoctor does not know the DataLoader keyword(s) {', '.join(unknown)} of this "
            "torch release: this DataLoader runs as plain torch, unsupervised."
        )
    return None


_warned: set[str] = set()


def _warn_once(loader: Any, message: str, stacklevel: int = 4) -> None:
    if message in _warned:
        return
    _warned.add(message)
    # at the user's `for ... in loader` (5: from ``ld_get_iterator`` through torch's ``__iter__``)
    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)


def _announce(step: Any) -> bool:
    if step is None:
        return False
    from loaderdoctor.supervise.heal import HealWarning

    warnings.warn(
        f"loaderdoctor: {step.reason}; back up to num_workers={step.num_workers}, "
        f"prefetch_factor={step.prefetch_factor}",
        HealWarning,
        stacklevel=3,
    )
    return True


__all__ = [
    "INCIDENT_SINKS",
    "KNOWN_TORCH_KEYWORDS",
    "LOADER_HOOKS",
    "DataLoader",
    "Incident",
    "LoaderReport",
]
