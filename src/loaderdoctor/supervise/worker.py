"""The worker side: wrappers around the user's Dataset (map-style and iterable).

They write the flight recorder (which sample is in flight, which stage) and tag every Python
exception with the sample index before torch ships it to the main process. A clean sample costs a
few numpy item writes. The collate_fn and worker_init_fn wrappers are in ``worker_collate`` and
``worker_hooks``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import Dataset, IterableDataset

from loaderdoctor.recorder import _FETCH, _INDEX, _SAMPLES, _SINCE, _STAGE, NO_INDEX, Stage
from loaderdoctor.supervise.exception_tags import tag_exception
from loaderdoctor.supervise.sample_policy import (
    DroppedSamples,
    SamplePolicy,
    SkippedBatch,
    _safe_structure,
)
from loaderdoctor.supervise.worker_state import STATE, _failure, record_event

REFERENCE_SAMPLES = 5


class SupervisedMapDataset(Dataset[Any]):
    """Forwards to the user's map-style dataset and records which index is in flight.

    torch's fetcher calls ``__getitems__`` once per batch when a dataset has it; this wrapper
    always has it and runs the per-sample loop itself, so a clean sample costs three shared-memory
    writes and a clock read, with no extra Python call layer (it matters for tiny samples).
    """

    def __init__(self, dataset: Any, policy: SamplePolicy | None = None) -> None:
        self.dataset = dataset
        self.policy = policy

    def __getitem__(self, index: Any) -> Any:
        # batch_size=None (no auto-collation) and the num_workers=0 paths come here.
        if self.policy is not None and (
            self.policy.on_error != "raise" or index in self.policy.quarantined
        ):
            kept = self._heal_batch([index])
            return (
                kept[0]
                if kept and not isinstance(kept, DroppedSamples)
                else SkippedBatch([index], "skipped")
            )
        slot = STATE.slot
        if slot is not None:
            slot.fetching(index)
        STATE.batch_indices.append(index)
        try:
            return self.dataset[index]
        except Exception as error:
            if slot is not None:
                slot.error()
            tag_exception(error, index=index, stage="fetch", batch=list(STATE.batch_indices))
            STATE.batch_indices.clear()
            raise

    def __getitems__(self, indices: list[Any]) -> list[Any]:
        policy = self.policy
        if policy is not None:
            if policy.on_error != "raise":
                return self._heal_batch(indices)
            # Raising, but quarantined samples are never fetched.
            kept = [index for index in indices if index not in policy.quarantined]
            if len(kept) < len(indices):
                dropped = not kept or policy.drop_last
                for index in indices:
                    if index in policy.quarantined:
                        record_event(
                            {
                                "index": index,
                                "stage": "quarantined",
                                "attempts": 0,
                                "action": "skipped",
                                "dropped": dropped,
                            }
                        )
                if dropped:
                    STATE.batch_indices = kept
                    return DroppedSamples([])
                indices = kept
        dataset = self.dataset
        slot = STATE.slot
        STATE.batch_indices = indices
        samples = []
        index = None
        try:
            if slot is None:
                for index in indices:
                    samples.append(dataset[index])
            else:
                flat, base, clock = slot.hot_path()
                index_at, stage_at, since_at = base + _INDEX, base + _STAGE, base + _SINCE
                flat[stage_at] = _FETCH
                for index in indices:
                    flat[index_at] = index if type(index) is int else NO_INDEX
                    flat[since_at] = clock()
                    samples.append(dataset[index])
                flat[base + _SAMPLES] += len(indices)
        except Exception as error:
            if slot is not None:
                slot.error()
            tag_exception(error, index=index, stage="fetch", batch=list(indices))
            STATE.batch_indices = []
            raise
        return samples

    def _fetch(self, index: Any, retries: int) -> tuple[bool, Any]:
        """(True, sample) or (False, failure) after ``retries`` further attempts."""
        slot = STATE.slot
        for attempt in range(retries + 1):
            if slot is not None:
                slot.fetching(index)
            try:
                return True, self.dataset[index]
            except Exception as error:
                if slot is not None:
                    slot.error()
                if attempt == retries:
                    return False, _failure(error, index, attempt + 1, "fetch")
        raise AssertionError("unreachable")  # pragma: no cover

    def _substitute(self, index: Any, policy: SamplePolicy) -> tuple[Any, Any] | None:
        """A deterministic healthy stand-in: the next index (cyclically) that loads."""
        if not isinstance(index, int) or not policy.dataset_len:
            return None
        for step in range(1, min(policy.dataset_len, 64)):
            candidate = (index + step) % policy.dataset_len
            if candidate in policy.quarantined or candidate in STATE.known_bad:
                continue
            ok, sample = self._fetch(candidate, 0)
            if ok:
                return candidate, sample
            STATE.known_bad.add(candidate)
        return None

    def _reference_sample(self, batch: list[Any]) -> Any:
        """The most common structure among a few healthy samples outside ``batch``.

        Used to tell the odd samples of a worker's first failing batch apart (later batches
        compare with the last batch that collated).
        """
        policy = self.policy
        if policy is None or not policy.dataset_len:
            return None
        taken = set(batch)
        counts: dict[Any, int] = {}
        tried = 0
        for candidate in range(policy.dataset_len):
            if tried >= REFERENCE_SAMPLES * 3 or sum(counts.values()) >= REFERENCE_SAMPLES:
                break
            if (
                candidate in taken
                or candidate in policy.quarantined
                or candidate in STATE.known_bad
            ):
                continue
            tried += 1
            ok, sample = self._fetch(candidate, 0)
            if ok:
                structure = _safe_structure(sample)
                counts[structure] = counts.get(structure, 0) + 1
        if not counts:
            return None
        return max(counts, key=lambda structure: counts[structure])

    def _heal_batch(self, indices: list[Any]) -> list[Any]:
        policy = self.policy
        assert policy is not None
        STATE.reference_fetch = self._reference_sample
        STATE.batch_indices = list(indices)
        samples: list[Any] = []
        kept_indices: list[Any] = []
        events: list[dict[str, Any]] = []
        for index in indices:
            if index in policy.quarantined:
                failure: dict[str, Any] = {"index": index, "stage": "quarantined", "attempts": 0}
            else:
                ok, result = self._fetch(index, policy.retries)
                if ok:
                    samples.append(result)
                    kept_indices.append(index)
                    continue
                failure = result
                STATE.known_bad.add(index)
            if policy.on_error == "replace":
                found = self._substitute(index, policy)
                if found is not None:
                    substitute, sample = found
                    samples.append(sample)
                    kept_indices.append(substitute)
                    events.append({**failure, "action": "replaced", "substitute": substitute})
                    continue
            events.append({**failure, "action": "skipped"})
        dropped = not samples or (len(samples) < len(indices) and policy.drop_last)
        for event in events:
            record_event({**event, "dropped": dropped})
        if dropped:
            STATE.batch_indices = kept_indices
            return DroppedSamples(samples)
        STATE.batch_indices = kept_indices
        return samples

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name: str) -> Any:
        # Dunder lookups must not be forwarded: torch probes ``hasattr(ds, "__getitems__")``.
        if name.startswith("__") or "dataset" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.dataset, name)


class SupervisedBatchedMapDataset(SupervisedMapDataset):
    """For datasets that fetch a whole batch at once with their own ``__getitems__``."""

    def __getitems__(self, indices: list[Any]) -> Any:
        slot = STATE.slot
        if slot is not None and indices:
            slot.fetching(indices[0])
        STATE.batch_indices = list(indices)
        try:
            return self.dataset.__getitems__(indices)
        except Exception as error:
            if slot is not None:
                slot.error()
            tag_exception(error, index=None, stage="fetch", batch=list(indices))
            STATE.batch_indices = []
            raise


class _SupervisedIterator:
    def __init__(self, iterator: Iterator[Any], policy: SamplePolicy | None = None) -> None:
        self.iterator = iterator
        self.policy = policy
        self.position = 0

    def __iter__(self) -> _SupervisedIterator:
        return self

    def __next__(self) -> Any:
        slot = STATE.slot
        while True:  # a loop, not a recursion: a stream may hold thousands of bad records in a row
            if slot is not None:
                slot.fetching(None)
            try:
                item = next(self.iterator)
            except StopIteration:
                if slot is not None:
                    slot.stage(Stage.IDLE)
                raise
            except Exception as error:
                if slot is not None:
                    slot.error()
                self.position += 1
                if self.policy is None:
                    tag_exception(error, position=self.position - 1, stage="fetch")
                    raise
                # A stream cannot retry an item: skip it and read on.
                failure = _failure(error, None, 1, "fetch")
                position = self.position - 1
                record_event(
                    {**failure, "position": position, "action": "skipped", "dropped": False}
                )
                continue
            self.position += 1
            return item


class SupervisedIterableDataset(IterableDataset[Any]):
    """Forwards to the user's IterableDataset and records the position in each worker's stream."""

    def __init__(self, dataset: Any, policy: SamplePolicy | None = None) -> None:
        self.dataset = dataset
        self.policy = policy

    def __iter__(self) -> Iterator[Any]:
        return _SupervisedIterator(iter(self.dataset), self.policy)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "dataset" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.dataset, name)
