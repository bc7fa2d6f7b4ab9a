"""The re-tries alone the policy asks for before a sample is blamed, and their controls.

A sample whose worker failed is re-tried alone in a fresh worker (``Retrier.alone``); failing
again, a control is re-tried the same way: a sample loaded whole earlier (delivered, or waiting in
torch's reorder buffer), else, where none has loaded whole yet, samples owed in other batches,
two of which must fail as the culprit did (one cause). A control that fails too shows the failure
is what the workers share, not the sample's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loaderdoctor import torch_compat
from loaderdoctor.forensics import Diagnosis
from loaderdoctor.supervise.heal_policy import Retried, Retry
from loaderdoctor.supervise.parent.repair import PoolParts, Repair, Replacement
from loaderdoctor.supervise.streams import StreamBatch
from loaderdoctor.supervise.worker.sample_policy import HealedBatch, SkippedBatch

UNTRIED_CONTROLS = 2  # the untried samples that must fail too before a failure is shared


@dataclass(frozen=True)
class ProbeFailure:
    """A sample that failed again alone in a fresh worker: which one, and its verdict's cause."""

    index: Any
    cause: str


class Retrier:
    """The re-tries alone the policy asks for, made in fresh workers; what they showed is
    counted and, for a control, said in the evidence. Before a re-try of a failure handled
    now, the dead worker's replacement starts (its start-up overlaps the re-try) or the pool
    stops, as the policy says; a death found while stopping has neither."""

    def __init__(
        self,
        parts: PoolParts,
        repair: Repair,
        probe: Callable[..., Any],
        diagnosis: Diagnosis,
        worker_id: int | None,
        stopping: bool,
    ) -> None:
        self.parts = parts
        self.repair = repair
        self.probe = probe
        self.diagnosis = diagnosis
        self.worker_id = worker_id
        self.stopping = stopping
        self.asked = False
        self.replacement: Replacement | None = None
        self.loaded_ahead: list[int] | None = None
        self.untried: list[int] | None = None

    def alone(self, retry: Retry) -> Retried:
        self.asked = True
        parts, repair = self.parts, self.repair
        if not self.stopping:
            if retry.replace_first and parts.streams is None:
                self.replacement = repair.replace_now(self.worker_id)
            if retry.stop_pool:
                # the stop empties torch's buffer and settles the owed batches
                self.loaded_ahead = loaded_ahead(parts)
                self.untried = untried(parts, retry.culprit)
                repair.stop(beside=self.worker_id)  # nothing the pool holds contends
        found = self.probe(parts.snapshot, [retry.culprit], collate=retry.collate)
        if isinstance(found, str):  # the probe could not tell: never the sample's failure
            parts.sup.counts.probe_failures += 1
            return Retried(found)
        if found is None:
            parts.sup.history.loaded_fine_alone += 1
            return Retried(False)
        return self._control(retry, found)

    def _control(self, retry: Retry, failure: ProbeFailure) -> Retried:
        """Before a sample is blamed: a sample loaded whole earlier in this run, re-tried alone the
        same way (a fresh worker, the same start method and timeout). Failing too, it shows the
        failure is what the workers share (a lock held at fork, a leaked semaphore, a handle the
        dataset opened in the main process, the machine): healing stops, nothing quarantined
        (the control named). Loading fine, it clears the rest: said in the evidence."""
        parts, diagnosis, culprit = self.parts, self.diagnosis, retry.culprit
        ahead = self.loaded_ahead if self.loaded_ahead is not None else loaded_ahead(parts)
        control = parts.sup.control_sample(culprit, ahead)
        if control is None:
            return self._untried_controls(retry, failure)
        outcome = self._probe_control(control, retry, "loaded whole earlier")
        if isinstance(outcome, str):
            return Retried(True)
        if outcome is None:
            diagnosis.evidence.append(
                f"control: sample {control!r}, loaded whole earlier, loaded fine alone the same way"
            )
            return Retried(True)
        return Retried(True, control)

    def _untried_controls(self, retry: Retry, failure: ProbeFailure) -> Retried:
        """With no sample loaded whole yet (a lock held before the first batch), samples not
        tried yet stand in as controls, from batches other than the culprit's: one that loads
        fine alone clears the rest; when two fail too, and alike, the failure is shared. (Two,
        because an untried control can be a bad sample itself; alike, because one that fails
        another way is one: it clears nothing and shares nothing, and the next is tried.)"""
        parts, diagnosis = self.parts, self.diagnosis
        owed = self.untried if self.untried is not None else untried(parts, retry.culprit)
        failed: list[int] = []
        controls = _spread(owed, UNTRIED_CONTROLS + 1)
        for control in controls:
            outcome = self._probe_control(control, retry, "not loaded before")
            if isinstance(outcome, str):
                return Retried(True)
            if outcome is None:
                before = f" (sample {failed[0]!r}, another, failed too)" if failed else ""
                diagnosis.evidence.append(
                    f"control: sample {control!r}, not loaded before (no sample had loaded whole "
                    f"yet), loaded fine alone the same way{before}"
                )
                return Retried(True)
            if outcome.cause != failure.cause:  # a shared failure is one cause
                diagnosis.evidence.append(
                    f"control: sample {control!r}, not loaded before, failed alone another way "
                    f"({outcome.cause}, where sample {retry.culprit!r}'s was "
                    f"{failure.cause}): a bad sample of its own, it clears nothing"
                )
                continue
            failed.append(control)
            if len(failed) == UNTRIED_CONTROLS:
                break
        if len(failed) < UNTRIED_CONTROLS:
            diagnosis.evidence.append(
                "no control cleared the rest: each sample owed re-tried alone failed too, but "
                f"not twice as sample {retry.culprit!r} did"
                if controls
                else "no control: no sample was loaded whole before this one, nor another "
                "sample owed, to re-try the same way and clear the rest"
            )
            return Retried(True)
        return Retried(True, failed[0], tuple(failed[1:]), loaded_before=False)

    def _probe_control(self, control: int, retry: Retry, chosen: str) -> Any:
        """``control`` re-tried alone as the culprit was (``chosen``: how it was picked). A
        probe that could not tell is counted and said: it clears nothing and blames nothing."""
        outcome = self.probe(self.parts.snapshot, [control], collate=retry.collate)
        if isinstance(outcome, str):
            self.parts.sup.counts.probe_failures += 1
            self.diagnosis.evidence.append(
                f"control: sample {control!r}, {chosen}, could not be re-tried ({outcome})"
            )
        return outcome


def loaded_ahead(parts: PoolParts) -> list[int]:
    """The samples of the batches that came back whole ahead of their turn, waiting in torch's
    reorder buffer: loaded fine by a worker, so a control when none is delivered."""
    found = list[int]()
    for task, info in parts.books.task_info.items():
        if len(info) != 2 or not _whole(info[1]):
            continue
        indices = parts.ledger.indices_of(task)
        if isinstance(indices, list):
            found.extend(i for i in indices if type(i) is int)
    return found


def untried(parts: PoolParts, culprit: Any) -> list[int]:
    """The samples owed (sent, not delivered) outside the culprit's batch, none loaded or
    quarantined yet, in order: controls when no sample has loaded whole."""
    if parts.streams is not None:
        return []
    found, quarantine = list[int](), parts.sup.quarantine
    for indices in parts.ledger.owed_in_order():
        if not isinstance(indices, list) or culprit in indices:
            continue
        found.extend(i for i in indices if type(i) is int and not in_quarantine(i, quarantine))
    return found


def _spread(candidates: list[int], count: int) -> list[int]:
    """``count`` of ``candidates`` far apart (bad samples come in runs): the last, the middle."""
    picked: list[int] = []
    for position in (len(candidates) - 1, len(candidates) // 2, 0):
        if 0 <= position < len(candidates) and candidates[position] not in picked:
            picked.append(candidates[position])
    return picked[:count]


def _whole(data: Any) -> bool:
    """A batch received as its worker loaded it: not an exception, nor one a healing worker
    changed (a skip or a replacement leaves its indices not all loaded)."""
    return not torch_compat.is_exception_wrapper(data) and not isinstance(
        data, (SkippedBatch, HealedBatch, StreamBatch)
    )


def in_quarantine(index: Any, quarantine: Any) -> bool:
    """``index`` is quarantined (an unhashable index never is)."""
    try:
        return index is not None and index in quarantine
    except TypeError:  # an unhashable index
        return False
