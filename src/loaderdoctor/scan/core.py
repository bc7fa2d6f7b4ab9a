"""Fetch every index through the user's code in supervised, healing workers; collect the verdicts.

Only a small summary of each sample (its structure and how long it took) crosses processes: the
dataset is wrapped so that ``__getitem__`` returns ``(index, seconds, structure)``.
"""

from __future__ import annotations

import heapq
import time
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

from loaderdoctor.scan.model import BadSample, Outlier, ScanReport, SlowSample
from loaderdoctor.supervise.quarantine import QuarantineEntry
from loaderdoctor.supervise.quarantine import now as quarantine_now

MAX_LISTED_ITEMS = 16  # longer sequences are described by length and first element
SLOWEST = 5
# A fresh loader per round: the healing loader stops respawning after a few deaths
# (heal.MAX_RESPAWNS); a scan of a very broken dataset goes on with the indices left.
MAX_ROUNDS = 1000

Progress = Callable[[int, int], None]  # (done, total)


class SummarizingDataset:
    """Wraps a map-style dataset: ``[i]`` returns ``(i, seconds, structure)``, not the sample."""

    def __init__(self, dataset: Any) -> None:
        self.inner = dataset

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> tuple[int, float, str]:
        start = time.perf_counter()
        sample = self.inner[index]
        seconds = time.perf_counter() - start
        return index, seconds, describe(sample)


def keep_summary(summary: Any) -> Any:
    """The collate_fn: the summary is already small and plain; torch must not convert it."""
    return summary


def describe(sample: Any) -> str:
    """The structure that ``default_collate`` cares about: types, and shapes/dtypes of arrays."""
    import torch

    if isinstance(sample, torch.Tensor):
        return f"Tensor[{str(sample.dtype).removeprefix('torch.')}]{tuple(sample.shape)}"
    kind = type(sample)
    if kind.__module__ == "numpy" and hasattr(sample, "shape") and hasattr(sample, "dtype"):
        return f"{kind.__name__}[{sample.dtype}]{tuple(sample.shape)}"
    if isinstance(sample, dict):
        items = ", ".join(f"{key!r}: {describe(value)}" for key, value in sorted_items(sample))
        return "{" + items + "}"
    if isinstance(sample, (list, tuple)):
        name = kind.__name__
        if len(sample) > MAX_LISTED_ITEMS:
            return f"{name}[{len(sample)} x {describe(sample[0])}]"
        return f"{name}(" + ", ".join(describe(item) for item in sample) + ")"
    if kind.__module__.startswith("PIL.") and hasattr(sample, "mode"):
        return f"Image[{sample.mode}]"
    return kind.__name__


def sorted_items(mapping: dict[Any, Any]) -> list[tuple[Any, Any]]:
    try:
        return sorted(mapping.items())
    except TypeError:  # keys of mixed types
        return list(mapping.items())


def scan_dataset(
    dataset: Any,
    *,
    spec: str = "",
    num_workers: int = 2,
    timeout: float = 60.0,
    progress: Progress | None = None,
) -> ScanReport:
    """Fetch every index of ``dataset`` in isolated workers; every failure marks its index."""
    from loaderdoctor.forensics import Diagnosis
    from loaderdoctor.supervise import DataLoader, LoaderError
    from loaderdoctor.supervise.heal import HealWarning
    from loaderdoctor.supervise.samples import sample_file

    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise TypeError("scan needs a map-style dataset (__getitem__ and __len__)")
    total = len(dataset)
    wrapped = SummarizingDataset(dataset)
    times: dict[int, float] = {}
    structures: dict[int, str] = {}
    verdicts: dict[int, Diagnosis] = {}
    remaining = list(range(total))
    start = time.perf_counter()
    for _ in range(MAX_ROUNDS):
        if not remaining:
            break
        loader = DataLoader(
            wrapped,
            batch_size=None,
            sampler=remaining,
            num_workers=num_workers,
            collate_fn=keep_summary,
            on_error="skip",
            heal=True,
            hang_timeout=timeout,
        )
        failure: LoaderError | None = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", HealWarning)  # every action is in loader.report
            try:
                for index, seconds, structure in loader:
                    times[index] = seconds
                    structures[index] = structure
                    if progress is not None:
                        progress(len(times) + len(verdicts), total)
            except LoaderError as error:
                failure = error
        report = loader.report
        for incident in report.incidents:
            for index in incident.diagnosis.indices:
                if isinstance(index, int) and index not in times:
                    verdicts.setdefault(index, incident.diagnosis)
        if failure is not None and failure.diagnosis is not None:
            for index in failure.diagnosis.indices:
                if isinstance(index, int) and index not in times:
                    verdicts.setdefault(index, failure.diagnosis)
        before = len(remaining)
        remaining = [i for i in remaining if i not in times and i not in verdicts]
        if progress is not None:
            progress(len(times) + len(verdicts), total)
        if failure is not None and len(remaining) == before:
            # no progress at all: the failure names no sample; blame the first one left
            verdicts[remaining.pop(0)] = failure.diagnosis or _unknown(str(failure))
    seconds = time.perf_counter() - start
    for index in remaining:  # only reachable past MAX_ROUNDS
        verdicts[index] = _unknown("not scanned: too many failures")

    def file_of(index: int) -> str | None:
        return sample_file(dataset, index)

    bad = [
        BadSample(
            index=index,
            cause=verdicts[index].cause,
            file=verdicts[index].sample_file or file_of(index),
            message=_message(verdicts[index]),
            evidence=list(verdicts[index].evidence)[:8],
        )
        for index in sorted(verdicts)
    ]
    majority = Counter(structures.values()).most_common(1)[0][0] if structures else None
    outliers = [
        Outlier(index=index, structure=structure, expected=majority or "", file=file_of(index))
        for index, structure in sorted(structures.items())
        if structure != majority
    ]
    slowest = [
        SlowSample(index=index, seconds=round(times[index], 6), file=file_of(index))
        for index in heapq.nlargest(SLOWEST, times, key=times.__getitem__)
    ]
    return ScanReport(
        spec=spec,
        total=total,
        scanned=len(times),
        bad=bad,
        outliers=outliers,
        slowest=slowest,
        seconds=round(seconds, 3),
        num_workers=num_workers,
        structure=majority,
    )


def _message(diagnosis: Any) -> str:
    """The exception itself when there is one (``ValueError: corrupt record``), else the title."""
    for line in diagnosis.evidence:
        _, found, raised = line.partition(" raised ")
        if found and ": " in raised:
            return str(raised)
    return str(diagnosis.title)


def _unknown(message: str) -> Any:
    from loaderdoctor.forensics import Diagnosis

    return Diagnosis(
        cause="unknown",
        title=message,
        confidence=0.0,
        worker_id=None,
        pid=None,
        signal=None,
        exit_code=None,
        indices=[],
        evidence=[message],
        fixes=[],
    )


def quarantine_entries(report: ScanReport) -> dict[int, QuarantineEntry]:
    """The quarantine file's entries for every bad sample: ``DataLoader(quarantine=...)`` skips them."""
    when = quarantine_now()
    return {
        bad.index: QuarantineEntry(
            index=bad.index,
            cause=bad.cause,
            evidence=[bad.message, *bad.evidence],
            file=bad.file,
            when=when,
        )
        for bad in report.bad
    }
