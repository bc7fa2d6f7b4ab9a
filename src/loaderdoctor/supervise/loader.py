"""``loaderdoctor.DataLoader``: a drop-in, supervised ``torch.utils.data.DataLoader``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.utils.data

from loaderdoctor.forensics.evidence import Diagnosis

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
    ) -> None:
        if hang_timeout is not None and hang_timeout <= 0:
            raise ValueError("hang_timeout must be a positive number of seconds, or None")
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
        self.incidents: list[Incident] = []
        self._ld_epoch = -1

    def _get_iterator(self) -> Any:
        from loaderdoctor.supervise import iterator, worker

        if worker.is_spawn_bootstrapping():
            worker.write_bootstrap_marker()
        if self.num_workers == 0:
            return iterator.SupervisedSingleProcessIter(self)
        self.check_worker_number_rationality()
        return iterator.SupervisedMultiProcessingIter(self)

    def __iter__(self) -> Any:
        self._ld_epoch += 1
        current = self._iterator
        if current is not None and getattr(current, "_ld_failed", None) is not None:
            # Persistent workers died with the last epoch: start fresh ones, never resume a
            # dead iterator (stock torch would hang or lose the dead worker's batches).
            self._iterator = None
        return super().__iter__()

    def _ld_record(self, diagnosis: Diagnosis, action: str) -> Incident:
        incident = Incident(diagnosis, action)
        self.incidents.append(incident)
        for sink in INCIDENT_SINKS:
            try:
                sink(self, incident)
            except Exception:  # a report writer must never break the training loop
                pass
        return incident
