"""Healing: the run survives bad samples and dead workers, and each healthy sample arrives once.

The ledger rule: every batch handed to a worker is remembered (task -> indices) until the main
process delivers it. When a worker dies or hangs, the whole pool is rebuilt (a killed worker can
leave the shared result queue corrupt or its lock held) and every remembered, undelivered batch is
sent again, in order, before the sampler continues where it was. Nothing delivered is sent twice;
nothing undelivered is lost.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from loaderdoctor import torch_compat
from loaderdoctor.forensics import Diagnosis, Evidence
from loaderdoctor.recorder import Field
from loaderdoctor.supervise.worker_state import EVENTS_PREFIX

if TYPE_CHECKING:
    from loaderdoctor.supervise.loader import DataLoader

# Causes that say "this machine, now" rather than "this sample": back off rather than blame.
ENVIRONMENTAL = frozenset({"oom-killed", "shm-exhausted", "killed-by-signal", "fd-exhausted"})
# Deaths whose sample in flight is worth re-trying alone before it is quarantined.
SAMPLE_DEATHS = frozenset(
    {"native-crash", "oom-killed", "shm-exhausted", "worker-exit", "killed-by-signal"}
)
MAX_RESPAWNS = 8
PROBE_TIMEOUT_S = 60.0


class HealWarning(UserWarning):
    """Emitted for every healing action: healing is loud, never silent."""


class ResumeSampler:
    """The batches still owed (undelivered, in order), then the rest of the interrupted epoch."""

    def __init__(self, pending: list[Any], remaining: Iterator[Any], length: int) -> None:
        self.pending = pending
        self.remaining = remaining
        self.length = length

    def __iter__(self) -> Iterator[Any]:
        yield from self.pending
        yield from self.remaining

    def __len__(self) -> int:
        return self.length


class HealingMixin:
    """Healing for SupervisedMultiProcessingIter (kept apart to keep each module readable)."""

    _ld_loader: DataLoader
    _ld_batch_indices: dict[int, Any]
    _ld_log_dir: str
    _ld_iterable: bool
    _ld_start_method: str
    _ld_keep_log_dir: bool
    _ld_recorder: Any

    def _ld_init_healing(self, loader: DataLoader) -> None:
        self._ld_delegate: Any = None
        self._ld_healing_allowed = False
        self._ld_dropped_batches = 0
        self._ld_respawns = 0
        self._ld_event_offsets: dict[str, int] = {}
        self._ld_events_seen = 0
        generator = loader.generator if loader.generator is not None else torch.default_generator
        # Replayed at a respawn so that the new pool draws the same base seed as the first one
        # without consuming the user's generator (which would shift every later epoch).
        self._ld_generator_state = generator.get_state()

    # --- the ledger ------------------------------------------------------------------------
    def _ld_count_delivered(self, indices: Any) -> None:
        stats = self._ld_loader._ld_stats
        stats["batches"] += 1
        stats["samples"] += len(indices) if isinstance(indices, list) else 1

    def _ld_drain_events_if_any(self) -> None:
        total = self._ld_recorder.total(Field.EVENTS)
        if total != self._ld_events_seen:
            self._ld_events_seen = total
            self._ld_drain_events()

    def _ld_drain_events(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self._ld_log_dir) if n.startswith(EVENTS_PREFIX))
        except OSError:
            return
        for name in names:
            path = os.path.join(self._ld_log_dir, name)
            offset = self._ld_event_offsets.get(name, 0)
            try:
                with open(path, encoding="utf-8") as handle:
                    handle.seek(offset)
                    text = handle.read()
            except OSError:
                continue
            complete = text[: text.rfind("\n") + 1]  # a line still being written waits
            self._ld_event_offsets[name] = offset + len(complete.encode("utf-8"))
            for line in complete.splitlines():
                try:
                    self._ld_loader._ld_take_event(json.loads(line))
                except ValueError:
                    continue

    # --- deciding ------------------------------------------------------------------------
    def _ld_heal_failure(self, ev: Evidence, diagnosis: Diagnosis) -> bool:
        """Heal a dead or stuck worker; False when this failure must be raised instead."""
        loader = self._ld_loader
        if not self._ld_can_respawn():
            return False
        workers = self._num_workers  # type: ignore[attr-defined]
        prefetch = self._prefetch_factor  # type: ignore[attr-defined]
        culprit = ev.in_flight_index
        notes: list[str] = []
        action = "respawned"
        if ev.kind == "exception" and ev.stage == "send":
            # A batch that cannot be sent fails again from any worker: load in-process.
            workers, action = 0, "backed-off"
            notes.append("the rest of the epoch loads in the main process (nothing to send)")
        elif ev.kind == "death" and ev.reached_worker_init is False:
            return False  # the workers cannot start at all: nothing to respawn into
        elif diagnosis.cause == "worker-hang" and culprit is not None:
            loader._ld_quarantine_add(culprit, diagnosis)
            action = "quarantined"
        elif diagnosis.cause in SAMPLE_DEATHS and culprit is not None:
            if self._ld_probe(culprit):
                loader._ld_quarantine_add(culprit, diagnosis)
                action = "quarantined"
                notes.append(f"sample {culprit!r} failed again alone in a fresh worker")
            elif diagnosis.cause in ENVIRONMENTAL:
                workers, prefetch, action = self._ld_backed_off(workers, prefetch)
                notes.append(f"sample {culprit!r} loaded fine alone: the machine, not the sample")
            else:
                notes.append(f"sample {culprit!r} loaded fine alone: not reproducible")
        elif diagnosis.cause in ENVIRONMENTAL:
            workers, prefetch, action = self._ld_backed_off(workers, prefetch)
        diagnosis.evidence.extend(notes)
        detail = f" (sample {culprit!r})" if culprit is not None else ""
        self._ld_act(diagnosis, action, workers, prefetch, detail)
        return True

    def _ld_heal_environment(self, diagnosis: Diagnosis) -> bool:
        """Back off after an environmental failure reported as an exception (ENOSPC, EMFILE)."""
        if not self._ld_can_respawn():
            return False
        workers, prefetch, action = self._ld_backed_off(
            self._num_workers,  # type: ignore[attr-defined]
            self._prefetch_factor,  # type: ignore[attr-defined]
        )
        detail = f" (num_workers={workers}, prefetch_factor={prefetch})"
        self._ld_act(diagnosis, action, workers, prefetch, detail)
        return True

    def _ld_can_respawn(self) -> bool:
        return self._ld_loader.heal and not self._ld_iterable and self._ld_respawns < MAX_RESPAWNS

    def _ld_act(
        self, diagnosis: Diagnosis, action: str, workers: int, prefetch: int, detail: str
    ) -> None:
        """Record the incident, say so out loud, and rebuild the pool with what is owed."""
        if action == "backed-off":
            diagnosis.evidence.append(f"continuing with num_workers={workers}, prefetch={prefetch}")
        self._ld_loader._ld_record(diagnosis, action)
        warnings.warn(
            f"loaderdoctor healed: {diagnosis.title} [{diagnosis.cause}] -> {action}{detail}",
            HealWarning,
            stacklevel=3,
        )
        self._ld_respawn(workers, prefetch)

    def _ld_backed_off(self, workers: int, prefetch: int) -> tuple[int, int, str]:
        loader = self._ld_loader
        if prefetch > 1:
            prefetch = 1
        else:
            workers = workers // 2 if workers > 1 else 0
        loader._ld_backoff = (workers, prefetch)
        return workers, prefetch, "backed-off"

    def _ld_probe(self, index: Any) -> bool:
        """Load ``index`` alone in a fresh worker: True when it fails again."""
        from loaderdoctor.supervise.loader import DataLoader

        loader = self._ld_loader
        probe = DataLoader(
            loader.dataset,
            batch_size=None,
            sampler=[index],
            num_workers=1,
            worker_init_fn=loader.worker_init_fn,
            multiprocessing_context=loader.multiprocessing_context,
            hang_timeout=PROBE_TIMEOUT_S,
        )
        probe._ld_is_probe = True
        try:
            for _ in probe:
                pass
        except Exception:
            return True
        return False

    # --- acting --------------------------------------------------------------------------
    def _ld_respawn(self, workers: int, prefetch: int) -> None:
        from loaderdoctor.supervise.loader_view import _LoaderView
        from loaderdoctor.supervise.single_process import SupervisedSingleProcessIter

        loader = self._ld_loader
        owed = [self._ld_batch_indices[task] for task in sorted(self._ld_batch_indices)]
        loader._ld_stats["resent_batches"] += len(owed)
        remaining = self._sampler_iter  # type: ignore[attr-defined]
        self._ld_keep_log_dir = True
        try:
            self._ld_shutdown_now()  # type: ignore[attr-defined]
        finally:
            self._ld_keep_log_dir = False
        self._ld_drain_events()
        self._ld_batch_indices = {}
        self._ld_respawns += 1
        resume = ResumeSampler(owed, remaining, len(loader._index_sampler))
        if workers == 0:
            self._ld_delegate = SupervisedSingleProcessIter(loader, index_sampler=resume)
            return
        generator = torch.Generator()
        generator.set_state(self._ld_generator_state)
        overrides = self._ld_pool_overrides(workers)  # type: ignore[attr-defined]
        overrides.update(
            _index_sampler=resume,
            prefetch_factor=prefetch,
            generator=generator,
        )
        yielded: int = getattr(self, "_num_yielded", 0)
        self._ld_start_pool(_LoaderView(loader, **overrides))  # type: ignore[attr-defined]
        # later epochs use the real sampler; the count of batches yielded carries on
        vars(self).update(_num_yielded=yielded, _index_sampler=loader._index_sampler)

    def _ld_heal_start_failure(self, error: Exception) -> bool:
        """Workers could not start (pickling, spawn bootstrapping): load in-process, loudly."""
        loader = self._ld_loader
        if not loader.heal:
            return False
        from loaderdoctor.supervise.single_process import SupervisedSingleProcessIter

        start_error = self._ld_start_failure(error)  # type: ignore[attr-defined]
        diagnosis = start_error.diagnosis
        assert diagnosis is not None
        diagnosis.evidence.append("the epoch loads in the main process instead (num_workers=0)")
        loader._ld_record(diagnosis, "backed-off")
        loader._ld_backoff = (0, 1)
        warnings.warn(
            f"loaderdoctor healed: {diagnosis.title} [{diagnosis.cause}] -> loading in the main "
            "process (num_workers=0)",
            HealWarning,
            stacklevel=2,
        )
        vars(self)["_shutdown"] = True
        self._ld_delegate = SupervisedSingleProcessIter(loader)
        return True


__all__ = ["ENVIRONMENTAL", "HealWarning", "HealingMixin", "ResumeSampler", "torch_compat"]
