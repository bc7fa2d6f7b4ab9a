"""What a healing worker works with: its sample policy, the stand-ins for the batches it drops, and the
test that finds the odd samples of a batch that would not collate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loaderdoctor import torch_compat


@dataclass(frozen=True)
class SamplePolicy:
    """How a worker treats a sample that raises (travels to the workers with the dataset)."""

    on_error: str  # "skip" or "replace" ("raise" never builds a policy)
    retries: int
    quarantined: frozenset[Any]
    drop_last: bool
    dataset_len: int | None


class SkippedBatch:
    """Stands in for a batch whose every sample was skipped (``events``: their skips)."""

    def __init__(
        self, indices: list[Any], reason: str, events: list[dict[str, Any]] | None = None
    ) -> None:
        self.indices = indices
        self.reason = reason
        self.events = events or []

    def __repr__(self) -> str:
        return f"SkippedBatch({self.indices!r}, {self.reason!r})"


class HealedBatch:
    """A batch a healing worker changed (a sample skipped or replaced): the batch, how many
    samples it holds, and the events of its samples. The main process counts them when the user
    receives the batch, so every count equals what the loop received: a batch lost with its
    worker and loaded again by its replacement counts once."""

    __slots__ = ("batch", "events", "samples")

    def __init__(self, batch: Any, samples: int, events: list[dict[str, Any]]) -> None:
        self.batch = batch
        self.samples = samples
        self.events = events

    def pin_memory(self, device: Any = None) -> HealedBatch:
        """torch's pin thread calls this: pin the batch inside."""
        pinned = torch_compat.pin_memory(self.batch, device)
        return HealedBatch(pinned, self.samples, self.events)

    def __repr__(self) -> str:
        return f"HealedBatch({self.samples} samples, {len(self.events)} events)"


class DroppedSamples(list[Any]):
    """What a healing ``__getitems__`` returns for a batch that must not be collated."""


def _structure(sample: Any) -> Any:
    """A hashable description of a sample's shape and types, to find the odd one in a batch."""
    shape = getattr(sample, "shape", None)
    dtype = getattr(sample, "dtype", None)
    if shape is not None and dtype is not None:
        return (type(sample).__name__, tuple(shape), str(dtype))
    if isinstance(sample, dict):
        return ("dict", tuple(sorted((str(k), _structure(v)) for k, v in sample.items())))
    if isinstance(sample, (list, tuple)):
        return (type(sample).__name__, tuple(_structure(v) for v in sample))
    if isinstance(sample, (str, bytes)):
        return type(sample).__name__
    return type(sample).__name__


def _safe_structure(sample: Any) -> Any:
    try:
        return _structure(sample)
    except Exception:  # a user's sample type may refuse len/iteration
        return None


def odd_samples(
    samples: Any,
    indices: list[Any],
    reference: Any = None,
    votes: Mapping[Any, int] | None = None,
) -> list[Any]:
    """Indices whose structure differs from the rest of the batch (empty when undecidable).

    ``reference`` is the structure of a sample known to be good (from a batch that collated):
    when some samples match it, the others are the odd ones, whatever their number. Without it
    the majority decides, of the batch's samples and of ``votes`` (structures of samples outside
    the batch, with their counts); a tie decides nothing.
    """
    if not isinstance(samples, (list, tuple)) or len(samples) != len(indices) or len(samples) < 2:
        return []
    try:
        structures = [_structure(s) for s in samples]
    except Exception:  # a user's sample type may refuse len/iteration
        return []
    if len(set(structures)) < 2:
        return []
    if reference is not None and reference in structures:
        return [index for index, s in zip(indices, structures) if s != reference]
    counts: dict[Any, int] = dict(votes or {})
    for structure in structures:
        counts[structure] = counts.get(structure, 0) + 1
    ranked = sorted(counts.values(), reverse=True)
    if ranked[0] == ranked[1]:
        return []
    majority = max(counts, key=lambda s: counts[s])
    return [index for index, s in zip(indices, structures) if s != majority]
