"""num_workers=0 (and healing's in-process rung): torch's in-process iterator, supervised."""

from __future__ import annotations

import os
from typing import Any

from loaderdoctor import boundary, torch_compat
from loaderdoctor.forensics import Evidence, diagnose
from loaderdoctor.forensics.origin import format_traceback, origin_of
from loaderdoctor.forensics.verdict_text import format_verdict
from loaderdoctor.supervise.errors import attach
from loaderdoctor.supervise.heal import ResumeSampler, length_of
from loaderdoctor.supervise.heal_policy import POLICY, ActionKind, Situation
from loaderdoctor.supervise.parent import collect
from loaderdoctor.supervise.parent.repair import (
    delivered_batch,
    record,
    take_events,
    take_in_process_events,
)
from loaderdoctor.supervise.parent.supervision import LoaderSnapshot, Supervision
from loaderdoctor.supervise.samples import sample_file, sample_shard
from loaderdoctor.supervise.worker.collate import SupervisedCollate
from loaderdoctor.supervise.worker.context import WorkerContext
from loaderdoctor.supervise.worker.exception_tags import read_tags
from loaderdoctor.supervise.worker.loader_view import attach_context, wrap_dataset
from loaderdoctor.supervise.worker.sample_policy import SkippedBatch


def internal_evidence(error: BaseException, epoch: int | None) -> Evidence:
    """Evidence of a failure of loaderdoctor's own code in this process."""
    return Evidence(
        kind="exception",
        pid=os.getpid(),
        epoch=epoch,
        exception_type=type(error).__name__,
        exception_message=f"{type(error).__name__}: {error}",
        traceback=format_traceback(error),
        internal_origin=origin_of(error),
    )


class SupervisedSingleProcessIter(torch_compat.HookedSingleProcessIter):
    """num_workers=0: no process to watch, but every exception still names its sample.

    Also healing's in-process rung: loading the rest of an epoch in this process (the snapshot's
    ``_index_sampler`` then resumes where the worker pool stopped).
    """

    def __init__(self, snapshot: LoaderSnapshot, supervision: Supervision) -> None:
        self._ld_sup = supervision
        self._ld_snapshot = snapshot
        self._ld_last_index: Any = None
        self._ld_plain: Any = None  # plain torch after an internal error, with healing on
        policy = supervision.sample_policy(snapshot.drop_last)
        dataset = wrap_dataset(snapshot.dataset, torch_compat.dataset_kind(snapshot), policy)
        collate = SupervisedCollate(snapshot.collate_fn, heal=policy is not None)
        # This iterator's own context: it starts afresh, whatever other loaders of this process
        # (or the worker it runs in) learned; its events go to the loader's supervision.
        attach_context(WorkerContext.in_process(supervision.in_process_events), dataset, collate)
        super().__init__(snapshot.with_overrides(dataset=dataset, collate_fn=collate))

    def ld_next_index(self) -> Any:
        index = super().ld_next_index()
        self._ld_last_index = index
        return index

    def ld_next_data(self) -> Any:
        sup = self._ld_sup
        while True:
            if self._ld_plain is not None:
                return torch_compat.next_data(self._ld_plain)
            data = self._ld_load_next()
            take_in_process_events(sup)
            if isinstance(data, SkippedBatch):
                take_events(sup, data.events)
                continue
            data = delivered_batch(sup, self._ld_last_index, data)
            if sup.backoff is not None:
                sup.backoff.delivered()
            return data

    def _ld_load_next(self) -> Any:
        try:
            return super().ld_next_data()
        except StopIteration:
            take_in_process_events(self._ld_sup)  # a stream's last skips come with its end
            self._ld_sup.epoch_finished()
            raise
        except Exception as error:  # the user's dataset in this process: any exception
            notes = list(getattr(error, "__notes__", []))
            tags = read_tags("\n".join(notes))
            if not tags:
                if origin_of(error) is not None:
                    return self._ld_internal_error(error)
                raise
            ev = Evidence(
                kind="exception",
                pid=os.getpid(),
                epoch=self._ld_sup.epoch,
                exception_type=type(error).__name__,
                exception_message=f"{type(error).__name__}: {error}",
                traceback=format_traceback(error),
            )
            if isinstance(error, OSError):
                ev.errno = error.errno
            collect.facts_from_tags(ev, tags)
            ev.worker_id = None
            ev.sample_file = sample_file(self._ld_snapshot.dataset, ev.in_flight_index)
            ev.sample_shard = sample_shard(self._ld_snapshot.dataset, ev.in_flight_index)
            diagnosis = diagnose(ev)
            record(self._ld_sup, diagnosis, "raised")
            error.__notes__ = [n for n in notes if not n.startswith(boundary.TAG_MARKER)]
            error.add_note(format_verdict(diagnosis, include_stack=False))
            attach(error, diagnosis)
            raise

    def _ld_internal_error(self, error: Exception) -> Any:
        """loaderdoctor's own code failed: never a verdict about the user's job; the policy
        says plain torch takes over (healing or not: a bug of ours must not end a job that
        plain torch runs)."""
        sup = self._ld_sup
        diagnosis = diagnose(internal_evidence(error, sup.epoch))
        attach(error, diagnosis)
        at = Situation(
            heal=sup.settings.heal,
            iterable=torch_compat.is_iterable(self._ld_snapshot),
            deaths_in_a_row=sup.history.deaths_in_a_row,
            num_workers=0,
            prefetch_factor=0,
            kind="exception",
        )
        action = POLICY.plan(diagnosis, at).action
        if action.kind is not ActionKind.FALL_BACK:
            raise error
        diagnosis.evidence.append(
            "plain torch loading takes over for the rest of this loader's life"
        )
        record(sup, diagnosis, "fell-back")
        sup.falls_back_to_plain_torch()
        # The batch in flight is loaded again, by torch alone, then the rest of the epoch.
        pending = [self._ld_last_index] if self._ld_last_index is not None else []
        sampler_iter, index_sampler = self.ld_rest()
        self._ld_plain = torch_compat.SingleProcessIter(
            self._ld_snapshot.with_overrides(
                **torch_compat.sampling_from(
                    ResumeSampler(pending, sampler_iter, length_of(index_sampler))
                )
            )
        )
        return torch_compat.next_data(self._ld_plain)
