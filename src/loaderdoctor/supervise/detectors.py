"""Silent data bugs: what no crash reveals, found while the loader runs.

Four bugs train a model on the wrong data without an error, and each leaves a cheap trace in the
main process:

- an ``IterableDataset`` that does not split its stream by ``get_worker_info()``: every worker
  yields the whole stream, so the first batches of an epoch arrive once per worker (their
  fingerprints repeat, worker after worker, in torch's round-robin order);
- a shuffling sampler that draws the same order every epoch: a ``DistributedSampler`` whose
  ``set_epoch`` is never called, or a global seed reset inside the epoch loop (the first batches'
  indices equal the previous epoch's);
- persistent workers that never see a dataset attribute the main process changed after they
  started (a curriculum's difficulty, an image size): compared at each epoch start with what the
  main process held when the workers started;
- random generators cloned into every worker (``supervise.worker.rng_states``).

Each is found once per loader and kept for the report at once; its ``DataWarning`` (evidence and
fix) is said at the next epoch boundary, when the epoch ends or the next one starts, never between
two batches: on a run that torch's loader finishes without a warning, none interrupts the epoch (a
test that asserts no warning while it iterates, as torch's own suite does, passes). ``strict`` (the
``strict_data`` keyword, ``loaderdoctor run --strict``) raises ``DataError`` at once instead. The
cost is bounded: a fingerprint of a few dozen batches per epoch, one walk of the dataset's
attributes per epoch start.
"""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loaderdoctor.supervise.errors import LoaderError
from loaderdoctor.supervise.heal import user_stacklevel

STRICT_ENV = "LOADERDOCTOR_STRICT_DATA"
# The first batches of an epoch whose indices are compared with the previous epoch's; a shuffle
# that repeats 16 samples in order by chance has odds below 1 in 16! (2e13).
ORDER_BATCHES = 8
ORDER_MIN_SAMPLES = 16
# The first batches of a stream's epoch fingerprinted, per worker (at most STREAM_BATCHES)
STREAM_BATCHES_PER_WORKER = 4
STREAM_BATCHES = 32
FINGERPRINT_ELEMENTS = 256  # per tensor: a strided sample, not the whole batch
FINGERPRINT_LEAVES = 16  # per batch
ATTRIBUTE_DEPTH = 3  # dataset.transform.transforms[0].size
MAX_ATTRIBUTE_OBJECTS = 128
_SCALARS = (str, int, float, bool)


class DataWarning(UserWarning):
    """The loader delivers wrong data without an error (duplicated stream, frozen shuffle, stale
    persistent workers, cloned randomness)."""


class DataError(LoaderError):
    """A ``DataWarning`` raised instead (``strict_data=True``, ``loaderdoctor run --strict``)."""


@dataclass
class DataFinding:
    kind: str  # "duplicated-stream" | "frozen-order" | "stale-workers" | "cloned-randomness"
    title: str
    epoch: int
    evidence: list[str]
    fix: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "title": self.title,
            "epoch": self.epoch,
            "evidence": list(self.evidence),
            "fix": self.fix,
        }

    def message(self) -> str:
        lines = [f"loaderdoctor: {self.title} [{self.kind}]"]
        lines += [f"  {line}" for line in self.evidence]
        lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


@dataclass
class PersistentRestart:
    epoch: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "reason": self.reason}


# --- fingerprints ----------------------------------------------------------------------------
def _tensor_bytes(value: Any) -> bytes | None:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type != "cpu" or value.layout != torch.strided:
            return None
        flat = value.detach().reshape(-1)
        step = max(1, flat.numel() // FINGERPRINT_ELEMENTS)
        sample = flat[::step][:FINGERPRINT_ELEMENTS].contiguous()
        head = f"{value.dtype}{tuple(value.shape)}".encode()
        return head + bytes(sample.view(torch.uint8).numpy().tobytes())
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray) and value.dtype != object:
        flat = value.reshape(-1)
        step = max(1, flat.size // FINGERPRINT_ELEMENTS)
        head = f"{value.dtype}{value.shape}".encode()
        return head + flat[::step][:FINGERPRINT_ELEMENTS].tobytes()
    return None


def batch_fingerprint(batch: Any) -> str | None:
    """A short hash of what a batch holds (a strided sample of each tensor, its scalars and
    strings); None when it holds nothing comparable."""
    parts: list[bytes] = []
    pending = [batch]
    while pending and len(parts) < FINGERPRINT_LEAVES:
        value = pending.pop()
        if isinstance(value, (str, bytes, int, float, bool)):
            parts.append(repr(value)[:200].encode())
        elif isinstance(value, dict):
            pending.extend(reversed(list(value.values())[:FINGERPRINT_LEAVES]))
        elif isinstance(value, (list, tuple)):
            pending.extend(reversed(value[:FINGERPRINT_LEAVES]))
        else:
            try:
                data = _tensor_bytes(value)
            except (RuntimeError, TypeError, ValueError):
                data = None
            if data is not None:
                parts.append(data)
    if not parts:
        return None
    return hashlib.blake2b(b"\0".join(parts), digest_size=8).hexdigest()


def simple_attributes(dataset: Any, depth: int = ATTRIBUTE_DEPTH) -> dict[str, str]:
    """``{"self.difficulty": "3"}``: the dataset's numbers, strings and small tuples of them, and
    those of the objects it holds (a transform's size), as their repr."""
    found: dict[str, str] = {}
    level: list[tuple[str, Any]] = [("self", dataset)]
    visited = 0
    for _ in range(depth):
        below: list[tuple[str, Any]] = []
        for path, owner in level:
            visited += 1
            if visited > MAX_ATTRIBUTE_OBJECTS:
                return found
            try:
                items = list(vars(owner).items())
            except TypeError:
                continue
            for name, value in items[:64]:
                if name.startswith("_") and path != "self":
                    continue  # the private state of what the dataset holds (a lock's flags)
                where = f"{path}.{name}"
                if isinstance(value, _SCALARS) or (
                    isinstance(value, tuple)
                    and len(value) <= 8
                    and all(isinstance(v, _SCALARS) for v in value)
                ):
                    found[where] = repr(value)[:120]
                elif isinstance(value, (list, tuple)) and len(value) <= 16:
                    below.extend(
                        (f"{where}[{i}]", item)
                        for i, item in enumerate(value)
                        if hasattr(item, "__dict__") and not callable(item)
                    )
                elif hasattr(value, "__dict__") and not isinstance(value, type):
                    below.append((where, value))
        level = below
    return found


# --- the samplers that promise a new order each epoch -----------------------------------------
def shuffling_sampler(loader: Any) -> Any:
    """The loader's sampler when it shuffles (None otherwise, or when it cannot be told)."""
    from torch.utils.data import RandomSampler, SubsetRandomSampler, WeightedRandomSampler
    from torch.utils.data.distributed import DistributedSampler

    sampler = getattr(getattr(loader, "batch_sampler", None), "sampler", None)
    if sampler is None:
        sampler = getattr(loader, "sampler", None)
    if isinstance(sampler, DistributedSampler):
        return sampler if sampler.shuffle else None
    if isinstance(sampler, (RandomSampler, SubsetRandomSampler, WeightedRandomSampler)):
        return sampler
    return None


def _batch_key(indices: Any) -> tuple[Any, ...] | None:
    if isinstance(indices, (list, tuple)):
        return tuple(indices)
    if isinstance(indices, int):
        return (indices,)
    return None


class DataWatch:
    """One loader's detectors: told of its epochs, pools, batches and workers' random states by
    ``Supervision``; keeps what it found for the report."""

    def __init__(self, dataset: Any, owner: Callable[[], Any], strict: bool | None = None) -> None:
        from torch.utils.data import IterableDataset

        self.dataset = dataset
        self.owner = owner  # the loader (a weak reference's call)
        self.iterable = isinstance(dataset, IterableDataset)
        self.strict = bool(os.environ.get(STRICT_ENV)) if strict is None else strict
        self.findings: list[DataFinding] = []
        self._untold: list[DataFinding] = []  # found, warned at the next epoch boundary
        self.restarts: list[PersistentRestart] = []
        self._found: set[str] = set()
        self.epoch = -1
        # How many more batches of this epoch to look at (0: none; the per-batch cost)
        self._watching = 0
        self._sampler: Any = None
        self._order: list[tuple[Any, ...]] = []
        self._previous_order: list[tuple[Any, ...]] | None = None
        self.worker_count = 0
        self._stream: list[str | None] = []
        # What the main process held when the pool's workers started, and a difference seen at
        # an epoch start, told at its first batch unless a new pool started meanwhile
        self._attributes_at_start: dict[str, str] | None = None
        self._stale: list[str] = []
        self._rng: dict[str, dict[str, set[int]]] = {}

    # --- moments ---------------------------------------------------------------------------
    def epoch_started(self, epoch: int) -> None:
        self.epoch_finished()  # the last epoch's, where its iterator was left before its end
        self.epoch = epoch
        loader = self.owner()
        if loader is None:
            return
        self._sampler = None if self.iterable else shuffling_sampler(loader)
        self._order = []
        self.worker_count = int(getattr(loader, "num_workers", 0) or 0)
        self._stream = []
        watch_stream = self.iterable and self.worker_count > 1
        self._watching = max(
            ORDER_BATCHES if self._sampler is not None else 0,
            min(STREAM_BATCHES, STREAM_BATCHES_PER_WORKER * self.worker_count)
            if watch_stream
            else 0,
        )
        self._stale = []
        if getattr(loader, "persistent_workers", False) and self._attributes_at_start is not None:
            self._stale = _changed(self._attributes_at_start, simple_attributes(self.dataset))

    def epoch_finished(self) -> None:
        """The epoch's iterator is exhausted: what it showed is said now."""
        self._epoch_ended()
        self.tell()

    def tell(self) -> None:
        """Warn the findings not said yet (at an epoch boundary)."""
        untold, self._untold = self._untold, []
        for finding in untold:
            warnings.warn(finding.message(), DataWarning, stacklevel=user_stacklevel())

    def workers_started(self) -> None:
        """A pool (or a replacement worker) started: its copy of the dataset is the main
        process's now; its random states are compared among themselves."""
        self._attributes_at_start = simple_attributes(self.dataset)
        self._stale = []
        self._rng = {}

    def delivered(self, indices: Any, batch: Any) -> None:
        if self._stale:
            self._tell_stale()
        if self._watching <= 0:
            return
        self._watching -= 1
        if self._sampler is not None and len(self._order) < ORDER_BATCHES:
            key = _batch_key(indices)
            if key is not None:
                self._order.append(key)
        if self.iterable and self.worker_count > 1:
            self._stream.append(batch_fingerprint(batch))
        if self._watching == 0:
            self._epoch_ended()

    def persistent_restarted(self, reason: str) -> None:
        self.restarts.append(PersistentRestart(self.epoch, reason))

    def worker_random_states(self, event: dict[str, Any]) -> None:
        """A worker's random states at its start (``rng_states.event``)."""
        worker = event.get("worker")
        states = event.get("states")
        if not isinstance(worker, int) or not isinstance(states, dict):
            return
        # one finding per object: an augmentation pipeline may hold several generators
        cloned: dict[str, list[tuple[str, str, list[int]]]] = {}
        for name, kind_and_print in states.items():
            try:
                kind, fingerprint = kind_and_print
            except (TypeError, ValueError):
                continue
            seen = self._rng.setdefault(name, {}).setdefault(str(fingerprint), set())
            seen.add(worker)
            if len(seen) >= 2:
                owner = name.rpartition(".")[0] if name.startswith("self.") else name
                cloned.setdefault(owner, []).append((name, str(kind), sorted(seen)))
        for generators in cloned.values():
            self._tell_cloned(generators, str(event.get("dataset")))

    # --- findings ------------------------------------------------------------------------------
    def _epoch_ended(self) -> None:
        """The epoch's window is complete (or the next epoch starts): compare."""
        self._watching = 0
        if self._sampler is not None and self._order:
            previous, self._previous_order = self._previous_order, self._order
            if previous == self._order and sum(map(len, self._order)) >= ORDER_MIN_SAMPLES:
                self._tell_frozen(self._order)
            self._order = []
        if self._stream:
            self._tell_if_duplicated(self._stream)
            self._stream = []

    def _found_once(self, key: str, finding: DataFinding) -> None:
        if key in self._found:
            return
        self._found.add(key)
        self.findings.append(finding)
        if self.strict:
            raise DataError(finding.message())
        self._untold.append(finding)

    def _tell_frozen(self, order: list[tuple[Any, ...]]) -> None:
        from torch.utils.data.distributed import DistributedSampler

        sampler = self._sampler
        samples = sum(map(len, order))
        first = [i for key in order for i in key][:8]
        evidence = [
            f"epoch {self.epoch} began with the same {len(order)} batches ({samples} samples) as "
            f"epoch {self.epoch - 1}, in the same order: indices {first}...",
        ]
        name = type(sampler).__name__
        if isinstance(sampler, DistributedSampler):
            evidence.append(
                f"the DistributedSampler's epoch is still {sampler.epoch}: set_epoch() was not "
                "called, so every epoch (on every rank) repeats the first one's order"
            )
            fix = (
                "call loader.sampler.set_epoch(epoch) at the start of each epoch, before "
                "iterating the loader"
            )
        else:
            evidence.append(
                f"the {name} drew its order from a generator in the same state at both epoch "
                "starts (the DataLoader's generator=, or torch's global one)"
            )
            fix = (
                "seed once, before the epoch loop: a torch.manual_seed(...) (or a generator "
                "re-seeded) inside the loop gives every epoch the same shuffle"
            )
        self._found_once(
            "frozen-order",
            DataFinding(
                "frozen-order",
                f"the {name} repeats the same order every epoch",
                self.epoch,
                evidence,
                fix,
            ),
        )

    def _tell_if_duplicated(self, prints: list[str | None]) -> None:
        positions: dict[str, list[int]] = {}
        for position, fingerprint in enumerate(prints):
            if fingerprint is not None:
                positions.setdefault(fingerprint, []).append(position)
        repeated = [p for p in positions.values() if len(p) >= 2]
        # Two distinct batches each arriving again: a stream that yields one constant batch
        # (synthetic data) says nothing
        if len(repeated) < 2:
            return
        copies = max(len(p) for p in repeated)
        workers = self.worker_count
        evidence = [
            f"of the first {len(prints)} batches of epoch {self.epoch}, {len(positions)} are "
            f"distinct: each arrived up to {copies} times",
        ]
        for group in repeated[:2]:
            from_workers = sorted({p % workers for p in group})
            evidence.append(
                f"batch {group[0]} arrived again as batch(es) "
                f"{', '.join(map(str, group[1:]))} (from workers "
                f"{', '.join(map(str, from_workers))}, taken in turn)"
            )
        evidence.append(
            f"{type(self.dataset).__name__}.__iter__ yields the same items in each of the "
            f"{workers} workers: it does not split its stream by get_worker_info()"
        )
        self._found_once(
            "duplicated-stream",
            DataFinding(
                "duplicated-stream",
                f"every worker yields the same stream: items arrive up to {copies} times",
                self.epoch,
                evidence,
                "in __iter__, take this worker's share: info = torch.utils.data."
                "get_worker_info(); itertools.islice(stream, info.id, None, info.num_workers) "
                "(or give each worker its own files)",
            ),
        )

    def _tell_stale(self) -> None:
        changed, self._stale = self._stale, []
        evidence = [f"{line} in the main process" for line in changed[:4]]
        evidence.append(
            "persistent_workers=True: the workers keep the copy of the dataset they started "
            "with; a change in the main process never reaches them"
        )
        self._found_once(
            "stale-workers",
            DataFinding(
                "stale-workers",
                f"the persistent workers load with stale {type(self.dataset).__name__} attributes",
                self.epoch,
                evidence,
                "pass the value through shared memory (a multiprocessing.Value or a shared "
                "tensor read in __getitem__), or set persistent_workers=False so that each "
                "epoch's workers copy the dataset anew",
            ),
        )

    def _tell_cloned(self, generators: list[tuple[str, str, list[int]]], dataset: str) -> None:
        """(name, kind, workers) of generators of one object that start alike in workers."""
        names = [name for name, _, _ in generators]
        workers = ", ".join(map(str, generators[0][2]))
        if names[0].startswith("self."):
            where = f"{dataset}'s {', '.join(name[len('self.') :] for name in names)}"
            fix = (
                f"create or seed {', '.join(names)} in each worker: in worker_init_fn (e.g. from "
                "torch.utils.data.get_worker_info().seed), or lazily at the first __getitem__"
            )
        else:
            where = generators[0][1]
            fix = (
                "seed each worker apart in worker_init_fn (torch.initial_seed() differs per "
                "worker), never with a constant"
            )
        self._found_once(
            f"cloned-randomness:{','.join(names)}",
            DataFinding(
                "cloned-randomness",
                f"workers {workers} start with the same random state ({where})",
                self.epoch,
                [
                    f"{name} ({kind}) has the same state in workers "
                    f"{', '.join(map(str, seen))} at their start: they draw the same "
                    '"random" augmentations'
                    for name, kind, seen in generators
                ],
                fix,
            ),
        )


def _changed(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """``self.difficulty: 1 when the workers started, 3 now`` for each value that changed
    (a value that was None then is an attribute the main process filled lazily: not told)."""
    return [
        f"{path}: {before[path]} when the workers started, {value} now"
        for path, value in now.items()
        if path in before and before[path] != value
    ]


__all__ = [
    "STRICT_ENV",
    "DataError",
    "DataFinding",
    "DataWarning",
    "DataWatch",
    "PersistentRestart",
    "batch_fingerprint",
    "shuffling_sampler",
    "simple_attributes",
]
