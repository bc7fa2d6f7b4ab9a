"""Turn a scan's per-index state into its report: bad samples, outliers, the costliest samples."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable
from typing import Any

from loaderdoctor.scan.model import (
    FlakySample,
    HungrySample,
    Outlier,
    Profile,
    ScanReport,
    SlowSample,
)
from loaderdoctor.scan.state import ScanState
from loaderdoctor.supervise.parent.quarantine import QuarantineEntry
from loaderdoctor.supervise.parent.quarantine import now as quarantine_now

TOP = 5  # slowest and memory-hungriest samples listed
PROFILE_POINTS = 400  # the profile's length, whatever the dataset's


def build_report(
    state: ScanState,
    file_of: Callable[[int], str | None],
    **settings: Any,
) -> ScanReport:
    """The report of ``state``; ``settings`` are ScanReport's run fields (seconds, workers...)."""
    loaded = state.loaded
    structures = Counter(item.structure for item in loaded.values())
    majority = structures.most_common(1)[0][0] if structures else None
    outliers = [
        Outlier(index=index, structure=item.structure, expected=majority or "", file=file_of(index))
        for index, item in sorted(loaded.items())
        if item.structure != majority
    ]
    slowest = [
        SlowSample(index=index, seconds=round(loaded[index].seconds, 6), file=file_of(index))
        for index in heapq.nlargest(TOP, loaded, key=lambda i: loaded[i].seconds)
    ]
    hungriest = [
        HungrySample(index=index, peak_bytes=loaded[index].peak_bytes, file=file_of(index))
        for index in heapq.nlargest(TOP, loaded, key=lambda i: loaded[i].peak_bytes)
        if loaded[index].peak_bytes > 0
    ]
    return ScanReport(
        spec=state.spec,
        total=state.total,
        scanned=len(loaded),
        bad=[state.bad[index] for index in sorted(state.bad)],
        outliers=outliers,
        slowest=slowest,
        structure=majority,
        hungriest=hungriest,
        profile=profile(state),
        worker_startup=sorted(round(seconds, 6) for seconds in state.startup),
        flaky=[
            FlakySample(
                index=index,
                cause=death.cause,
                file=death.file,
                message=death.message,
                evidence=death.evidence,
            )
            for index, death in sorted(state.deaths.items())
            if index in loaded  # killed a worker once, then loaded (the bad are listed as bad)
        ],
        shards=sorted(state.shards, key=lambda shard: shard.first),
        **settings,
    )


def profile(state: ScanState, points: int = PROFILE_POINTS) -> Profile | None:
    """The maximum time and peak memory over each bucket of consecutive indices."""
    if not state.loaded or state.total <= 0:
        return None
    step = max(1, -(-state.total // points))
    buckets = -(-state.total // step)
    seconds: list[float | None] = [None] * buckets
    peaks: list[int | None] = [None] * buckets
    for index, item in state.loaded.items():
        bucket = index // step
        if not 0 <= bucket < buckets:
            continue
        slow, peak = seconds[bucket], peaks[bucket]
        seconds[bucket] = round(item.seconds if slow is None else max(slow, item.seconds), 6)
        peaks[bucket] = item.peak_bytes if peak is None else max(peak, item.peak_bytes)
    return Profile(step=step, seconds=seconds, peak_bytes=peaks)


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


def length_hint(report: ScanReport) -> str | None:
    """When every index from some point to the end raised ``IndexError`` and none before did,
    the samples are not bad: ``__len__`` says more than ``__getitem__`` holds. One line, or
    None when the ``IndexError``s do not run to the end (a sample's own bug)."""
    raised = {
        bad.index
        for bad in report.bad
        if bad.message.startswith("IndexError")
        or any(line.startswith("IndexError") for line in bad.evidence[:1])
    }
    if not raised or report.scanned + len(report.bad) < report.total:
        return None  # an unfinished scan (or a resumed shard) cannot show the tail whole
    first = min(raised)
    if raised != set(range(first, report.total)):
        return None
    return (
        f"every index from {first} to {report.total - 1} raised IndexError and none before it "
        f"did: the dataset's __len__ says {report.total}, __getitem__ holds {first}; fix "
        "__len__ (those samples are in the quarantine file meanwhile)"
    )
