"""The worker side of a scan: fetch one sample through the user's code, return only its summary.

Only a small summary of each sample (how long it took, its structure, how far it raised the
worker's peak memory) crosses processes: the dataset is wrapped so that ``__getitem__`` returns
``(index, seconds, structure, peak_bytes, startup_seconds)``, never the sample itself.

A worker's first fetch also pays for the worker's start-up (imports and decoders loaded on first
use, files opened, caches filled): 500 ms where the sample itself takes 25. So the first sample
of each worker is fetched twice: the second fetch is the sample's own time, and what the first
took beyond it is the worker's start-up, reported apart (``startup_seconds``; None otherwise).
"""

from __future__ import annotations

import os
import time
from typing import Any

from loaderdoctor.system.memory import peak_rss_bytes

MAX_LISTED_ITEMS = 16  # longer sequences are described by length and first element


Summary = tuple[int, float, str, int, float | None]
_warmed_up: set[int] = set()  # pids whose first fetch is done (a forked worker is not warm)


class SummarizingDataset:
    """Wraps a map-style dataset: ``[i]`` returns ``(i, seconds, structure, peak, startup)``."""

    def __init__(self, dataset: Any, warm_up_limit_s: float = float("inf")) -> None:
        self.inner = dataset
        # A first fetch slower than this is not repeated: a second one could pass the hang
        # timeout that the first alone stays under (its time then includes the start-up).
        self.warm_up_limit_s = warm_up_limit_s

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> Summary:
        first_fetch = os.getpid() not in _warmed_up
        _warmed_up.add(os.getpid())
        seconds, sample, peak_bytes = self._fetch(index)
        if not first_fetch or seconds > self.warm_up_limit_s:
            return index, seconds, describe(sample), peak_bytes, None
        first = seconds
        seconds, sample, peak_bytes = self._fetch(index)  # the sample's own time, warm
        return index, seconds, describe(sample), peak_bytes, max(0.0, first - seconds)

    def _fetch(self, index: int) -> tuple[float, Any, int]:
        """``(seconds, sample, bytes)``: how long ``inner[index]`` took, and how far it raised
        the peak resident memory (from the resident memory just before)."""
        baseline = _reset_peak_rss()
        start = time.perf_counter()
        sample = self.inner[index]
        seconds = time.perf_counter() - start
        peak = peak_rss_bytes() or 0
        return seconds, sample, max(0, peak - baseline)


_clear_refs: dict[int, int] = {}  # pid -> descriptor of /proc/self/clear_refs (-1: not writable)


def _reset_peak_rss() -> int:
    """Reset this process's peak RSS to its current RSS (Linux >= 4.0); return it in bytes.

    Writing "5" to ``/proc/self/clear_refs`` resets the high-water mark that ``ru_maxrss``
    reports, so the peak after loading one sample is that sample's own (about 3 us in all). Where
    the file is not writable, the difference only shows samples that set a new record.
    """
    pid = os.getpid()
    descriptor = _clear_refs.get(pid)
    if descriptor is None:  # first sample in this process (a fork does not share the dict's fd)
        try:
            flags = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)  # Windows has no O_CLOEXEC
            descriptor = os.open("/proc/self/clear_refs", flags)
        except OSError:
            descriptor = -1
        _clear_refs[pid] = descriptor
    if descriptor >= 0:
        try:
            os.write(descriptor, b"5")
        except OSError:
            _clear_refs[pid] = -1
    return peak_rss_bytes() or 0


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
