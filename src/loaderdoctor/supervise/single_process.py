"""num_workers=0 (and healing's last resort): torch's in-process iterator, supervised."""

from __future__ import annotations

import os
import traceback
from typing import TYPE_CHECKING, Any

from loaderdoctor import torch_compat
from loaderdoctor.forensics import Evidence, diagnose
from loaderdoctor.report.text import format_verdict
from loaderdoctor.supervise import collect
from loaderdoctor.supervise.exception_tags import MARKER, read_tags
from loaderdoctor.supervise.heal_policy import SkippedBatch
from loaderdoctor.supervise.loader_view import _LoaderView, wrap_dataset
from loaderdoctor.supervise.samples import sample_file
from loaderdoctor.supervise.worker_collate import SupervisedCollate
from loaderdoctor.supervise.worker_exceptions import attach

if TYPE_CHECKING:
    from loaderdoctor.supervise.loader import DataLoader


class SupervisedSingleProcessIter(torch_compat.SingleProcessIter):
    """num_workers=0: no process to watch, but every exception still names its sample.

    Also the last resort of healing: in-process loading of the rest of an epoch
    (``index_sampler`` then resumes where the worker pool stopped).
    """

    def __init__(self, loader: DataLoader, index_sampler: Any = None) -> None:
        self._ld_loader = loader
        policy = loader._ld_policy()
        overrides: dict[str, Any] = {
            "dataset": wrap_dataset(loader.dataset, loader._dataset_kind, policy),
            "collate_fn": SupervisedCollate(loader.collate_fn, heal=policy is not None),
            "num_workers": 0,
            "timeout": 0,
        }
        if index_sampler is not None:
            overrides["_index_sampler"] = index_sampler
        super().__init__(_LoaderView(loader, **overrides))
        if index_sampler is not None:
            self._index_sampler = loader._index_sampler  # later epochs use the real sampler

    def _next_index(self) -> Any:
        index = super()._next_index()
        self._ld_last_index = index
        return index

    def _next_data(self) -> Any:
        loader = self._ld_loader
        while True:
            data = self._ld_next_data()
            loader._ld_take_in_process_events()
            if isinstance(data, SkippedBatch):
                continue
            stats = loader._ld_stats
            stats["batches"] += 1
            index = getattr(self, "_ld_last_index", None)
            stats["samples"] += len(index) if isinstance(index, list) else 1
            return data

    def _ld_next_data(self) -> Any:
        try:
            return super()._next_data()
        except StopIteration:
            raise
        except Exception as error:
            notes = list(getattr(error, "__notes__", []))
            tags = read_tags("\n".join(notes))
            if not tags:
                raise
            ev = Evidence(
                kind="exception",
                pid=os.getpid(),
                epoch=self._ld_loader._ld_epoch,
                exception_type=type(error).__name__,
                exception_message=f"{type(error).__name__}: {error}",
                traceback="".join(traceback.format_exception(error)),
            )
            if isinstance(error, OSError):
                ev.errno = error.errno
            collect.facts_from_tags(ev, tags)
            ev.worker_id = None
            ev.sample_file = sample_file(self._ld_loader.dataset, ev.in_flight_index)
            diagnosis = diagnose(ev)
            self._ld_loader._ld_record(diagnosis, "raised")
            error.__notes__ = [n for n in notes if not n.startswith(MARKER)]
            error.add_note(format_verdict(diagnosis, include_stack=False))
            attach(error, diagnosis)
            raise
