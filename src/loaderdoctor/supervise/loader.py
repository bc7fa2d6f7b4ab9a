"""``loaderdoctor.DataLoader``: a drop-in, supervised ``torch.utils.data.DataLoader``."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.utils.data

from loaderdoctor.forensics.evidence import Diagnosis
from loaderdoctor.supervise.heal_policy import HealPolicy
from loaderdoctor.supervise.quarantine import (
    QuarantineEntry,
    dataset_length,
    read_quarantine,
    write_quarantine,
)
from loaderdoctor.supervise.quarantine import now as quarantine_now

ON_ERROR_CHOICES = ("raise", "skip", "replace")

# Arguments that only some torch releases accept; passed through only when given.
_OPTIONAL_TORCH_ARGS = tuple(
    name
    for name in ("pin_memory_device", "in_order")
    if name in inspect.signature(torch.utils.data.DataLoader.__init__).parameters
)


# Callables told of every incident of every supervised loader in this process, as it happens.
# ``loaderdoctor run`` registers one that appends to the run's report; a sink must not raise.
INCIDENT_SINKS: list[Callable[[DataLoader, Incident], None]] = []


@dataclass
class Incident:
    """One failure seen by a loader and what was done about it."""

    diagnosis: Diagnosis
    action: str  # "raised" (healing adds skipped, replaced, quarantined, respawned, backed-off)

    def to_json(self) -> dict[str, Any]:
        d = self.diagnosis
        return {
            "cause": d.cause,
            "worker_id": d.worker_id,
            "pid": d.pid,
            "signal": d.signal,
            "exit_code": d.exit_code,
            "indices": list(d.indices),
            "epoch": d.epoch,
            "batch": d.batch,
            "action": self.action,
            "evidence": list(d.evidence),
            "fixes": list(d.fixes),
            "diagnosis": d.to_json(),
        }


class DataLoader(torch.utils.data.DataLoader):
    """A ``torch.utils.data.DataLoader`` whose every worker failure gets a verdict.

    Takes every argument of ``torch.utils.data.DataLoader`` and behaves identically while nothing
    fails (same batches, same order, same seeds). When a worker raises, crashes, is killed or
    hangs, the exception raised from ``next()`` names the cause, the sample in flight, the evidence
    and the fix, with the ``Diagnosis`` attached as ``error.diagnosis``.

    Keyword-only extras:
        hang_timeout: seconds without progress on one sample (or collate) after which the worker's
            Python stack is dumped, the worker is killed and ``WorkerHangError`` is raised.
            ``None`` (default) disables the watchdog.
    """

    def __init__(
        self,
        dataset: Any,
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
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        hang_timeout: float | None = None,
        heal: bool = False,
        on_error: str | None = None,
        retries: int | None = None,
        quarantine: str | os.PathLike[str] | None = None,
    ) -> None:
        if hang_timeout is not None and hang_timeout <= 0:
            raise ValueError("hang_timeout must be a positive number of seconds, or None")
        if on_error is None:
            on_error = "skip" if heal else "raise"
        if on_error not in ON_ERROR_CHOICES:
            raise ValueError(
                f"on_error must be one of {', '.join(ON_ERROR_CHOICES)}, got {on_error!r}"
            )
        if retries is None:
            retries = 1 if on_error != "raise" else 0
        if retries < 0:
            raise ValueError("retries must be >= 0")
        extra: dict[str, Any] = {}
        if "pin_memory_device" in _OPTIONAL_TORCH_ARGS:
            extra["pin_memory_device"] = pin_memory_device
        elif pin_memory_device:
            raise TypeError("this torch release does not accept pin_memory_device")
        if "in_order" in _OPTIONAL_TORCH_ARGS:
            extra["in_order"] = in_order
        elif not in_order:
            raise TypeError("this torch release does not accept in_order")
        super().__init__(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            num_workers=num_workers,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            drop_last=drop_last,
            timeout=timeout,
            worker_init_fn=worker_init_fn,
            multiprocessing_context=multiprocessing_context,
            generator=generator,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            **extra,
        )
        self.hang_timeout = hang_timeout
        self.heal = heal
        self.on_error = on_error
        self.retries = retries
        self.quarantine_path = os.fspath(quarantine) if quarantine is not None else None
        self.incidents: list[Incident] = []
        self._ld_epoch = -1
        self._ld_is_probe = False
        self._ld_backoff: tuple[int, int] | None = None
        self._ld_stats = {
            "batches": 0,
            "samples": 0,
            "skipped": 0,
            "replaced": 0,
            "dropped": 0,
            "resent_batches": 0,
        }
        self._ld_quarantine: dict[int, QuarantineEntry] = {}
        if self.quarantine_path is not None:
            self._ld_quarantine = read_quarantine(
                self.quarantine_path, dataset_length(self.dataset)
            )

    def _get_iterator(self) -> Any:
        from loaderdoctor.supervise import iterator, single_process, worker_hooks

        if worker_hooks.is_spawn_bootstrapping():
            worker_hooks.write_bootstrap_marker()
        workers = self.num_workers if self._ld_backoff is None else self._ld_backoff[0]
        if workers == 0:
            return single_process.SupervisedSingleProcessIter(self)
        self.check_worker_number_rationality()
        return iterator.SupervisedMultiProcessingIter(self)

    def __iter__(self) -> Any:
        self._ld_epoch += 1
        current = self._iterator
        if current is not None and (
            getattr(current, "_ld_failed", None) is not None
            or getattr(current, "_ld_delegate", None) is not None
        ):
            # Persistent workers died with the last epoch (or healing moved loading into this
            # process): start afresh, never resume a dead iterator (stock torch would hang or
            # lose the dead worker's batches).
            self._iterator = None
        if self._ld_backoff is not None and self.persistent_workers and self._ld_backoff[0] == 0:
            return self._get_iterator()
        return super().__iter__()

    # --- healing ------------------------------------------------------------------------
    def _ld_policy(self) -> HealPolicy | None:
        if self.on_error == "raise" and not self._ld_quarantine:
            return None
        on_error = self.on_error
        if on_error == "skip" and _distributed():
            # Under DistributedSampler every rank must yield the same number of batches or the
            # next collective deadlocks: keep batches full instead of short or dropped.
            on_error = "replace"
        try:
            length: int | None = len(self.dataset)  # type: ignore[arg-type]
        except TypeError:
            length = None
        return HealPolicy(
            on_error=on_error,
            retries=self.retries,
            quarantined=frozenset(self._ld_quarantine),
            drop_last=self.drop_last,
            dataset_len=length,
        )

    def _ld_quarantine_add(self, index: Any, diagnosis: Diagnosis) -> None:
        if not isinstance(index, int) or index in self._ld_quarantine:
            return
        self._ld_quarantine[index] = QuarantineEntry(
            index=index,
            cause=diagnosis.cause,
            evidence=list(diagnosis.evidence)[:8],
            file=diagnosis.sample_file,
            when=quarantine_now(),
        )
        if self.quarantine_path is not None:
            write_quarantine(self.quarantine_path, self._ld_quarantine)

    def _ld_take_event(self, event: dict[str, Any]) -> None:
        """A skip or replace decided in a worker (or in this process) enters the ledger."""
        from loaderdoctor.forensics import Evidence, diagnose
        from loaderdoctor.supervise.samples import sample_file

        action = event.get("action", "skipped")
        stats = self._ld_stats
        if action == "replaced":
            stats["replaced"] += 1
        elif event.get("dropped"):
            stats["dropped"] += 1
        else:
            stats["skipped"] += 1
            stats["samples"] -= 1
        if event.get("stage") == "quarantined":
            return  # known bad from an earlier incident or the quarantine file: no new verdict
        index = event.get("index")
        ev = Evidence(
            kind="exception",
            worker_id=event.get("worker"),
            epoch=self._ld_epoch,
            stage="collate" if event.get("stage") == "collate" else "fetch",
            in_flight_index=index,
            iterable_position=event.get("position"),
            exception_type=event.get("exception_type"),
            exception_message=event.get("message"),
            traceback=event.get("traceback"),
            errno=event.get("errno"),
            sample_file=sample_file(self.dataset, index),
        )
        if ev.stage == "collate" and index is not None:
            ev.odd_indices = [index]
        attempts = event.get("attempts") or 1
        if attempts > 1:
            ev.notes.append(f"failed {attempts} times in a row")
        if action == "replaced":
            ev.notes.append(f"replaced by sample {event.get('substitute')!r}")
        diagnosis = diagnose(ev)
        self._ld_record(diagnosis, action)
        self._ld_quarantine_add(index, diagnosis)

    def _ld_take_in_process_events(self) -> None:
        from loaderdoctor.supervise.worker_state import STATE

        while STATE.events:
            self._ld_take_event(STATE.events.pop(0))

    @property
    def report(self) -> LoaderReport:
        """What this loader saw and did: incidents with their actions, quarantine, counts."""
        current = self._iterator
        drain = getattr(current, "_ld_drain_events", None)
        if drain is not None and not getattr(current, "_shutdown", True):
            drain()
        self._ld_take_in_process_events()
        actions = {i.action for i in self.incidents}
        if not self.incidents:
            status = "ok"
        elif actions <= {"skipped", "replaced", "quarantined", "respawned", "backed-off"}:
            status = "healed"
        else:
            status = "crashed"
        return LoaderReport(
            status=status,
            incidents=list(self.incidents),
            quarantine=sorted(self._ld_quarantine),
            delivered={"batches": self._ld_stats["batches"], "samples": self._ld_stats["samples"]},
            counts=dict(self._ld_stats),
        )

    def _ld_record(self, diagnosis: Diagnosis, action: str) -> Incident:
        incident = Incident(diagnosis, action)
        self.incidents.append(incident)
        if self._ld_is_probe:
            return incident  # an isolated re-try made by healing: its parent reports the outcome
        for sink in INCIDENT_SINKS:
            try:
                sink(self, incident)
            except Exception:  # a report writer must never break the training loop
                pass
        return incident


@dataclass
class LoaderReport:
    status: str  # "ok" | "healed" | "crashed"
    incidents: list[Incident]
    quarantine: list[int]
    delivered: dict[str, int]
    counts: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "status": self.status,
            "incidents": [incident.to_json() for incident in self.incidents],
            "quarantine": list(self.quarantine),
            "delivered": dict(self.delivered),
            "counts": dict(self.counts),
        }


def _distributed() -> bool:
    import torch.distributed

    return bool(torch.distributed.is_available() and torch.distributed.is_initialized())
