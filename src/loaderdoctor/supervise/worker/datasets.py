"""The worker side: wrappers around the user's Dataset (map-style and iterable).

They write the flight recorder (which sample is in flight, which stage) and tag every Python
exception with the sample index before torch ships it to the main process. A clean sample costs a
few numpy item writes. What they know of their worker is its ``WorkerContext`` (``context``), given
to them at the worker's start. The collate_fn and worker_init_fn wrappers are in ``collate`` and
``hooks``.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

from torch.utils.data import Dataset, IterableDataset

from loaderdoctor.boundary import (
    NO_INDEX,
    ROW_INDEX,
    ROW_SAMPLES,
    ROW_SINCE,
    ROW_STAGE,
    STAGE_FETCH,
    Stage,
)
from loaderdoctor.recorder import WorkerSlot
from loaderdoctor.supervise import containment
from loaderdoctor.supervise.live_quarantine import NO_LIVE_QUARANTINE
from loaderdoctor.supervise.streams import (
    CHECKED_KEYS,
    StreamBatch,
    StreamResume,
    is_stateful,
    item_key,
    not_replayed_note,
)
from loaderdoctor.supervise.worker.context import EventOutbox, WorkerContext, _failure
from loaderdoctor.supervise.worker.exception_tags import record_exit, tag_exception
from loaderdoctor.supervise.worker.library_names import LibraryNames
from loaderdoctor.supervise.worker.sample_policy import (
    DroppedSamples,
    SamplePolicy,
    SkippedBatch,
    _safe_structure,
)
from loaderdoctor.supervise.worker.stream_names import NameTrail

REFERENCE_SAMPLES = 5


class SupervisedMapDataset(Dataset[Any]):
    """Forwards to the user's map-style dataset and records which index is in flight.

    torch's fetcher calls ``__getitems__`` once per batch when a dataset has it; this wrapper
    always has it and runs the per-sample loop itself, so a clean sample costs three shared-memory
    writes and a clock read, with no extra Python call layer (it matters for tiny samples).

    ``context`` is the worker's (``SupervisedWorkerInit`` gives each worker its own at its start)
    or the in-process iterator's (``loader_view.attach_context``).
    """

    def __init__(self, dataset: Any, policy: SamplePolicy | None = None) -> None:
        self.dataset = dataset
        self.policy = policy
        self.context = WorkerContext()  # the real one comes from ``loader_view.attach_context``

    def __getitem__(self, index: Any) -> Any:
        # batch_size=None (no auto-collation) and the num_workers=0 paths come here.
        policy = self.policy
        context = self.context
        if policy is not None or context.quarantine is not NO_LIVE_QUARANTINE:  # else: no cost
            if (policy is not None and policy.on_error != "raise") or self._quarantined(index):
                kept = self._heal_batch([index]) if policy is not None else self._left_out([index])
                return (
                    kept[0]
                    if kept and not isinstance(kept, DroppedSamples)
                    else SkippedBatch([index], "skipped")
                )
        slot = context.slot
        if slot is not None:
            slot.fetching(index)
        loading = context.loading
        loading.add(index)
        try:
            sample = self.dataset[index]
        except Exception as error:  # the user's dataset raises anything
            if slot is not None:
                slot.error()
            tag_exception(
                error,
                context.worker_id,
                index=index,
                stage="fetch",
                batch=list(loading.indices),
                loaded=loading.last_loaded,
            )
            loading.failed()
            raise
        except SystemExit as exiting:
            record_exit(context.stack_log, exiting)
            raise
        loading.loaded(index)
        return sample

    def __getitems__(self, indices: list[Any]) -> list[Any]:
        policy = self.policy
        if policy is not None and policy.on_error != "raise":
            return self._heal_batch(indices)
        context = self.context
        if policy is not None or context.quarantine is not NO_LIVE_QUARANTINE:
            # Raising, but quarantined samples are never fetched: each is looked up just
            # before its turn (the main process may quarantine one while this batch loads).
            return self._left_out(indices)
        dataset = self.dataset
        slot = context.slot
        context.loading.begin(indices)
        samples = []
        index = None
        # Our own bookkeeping stays outside the try: an error of ours is never the dataset's
        if slot is not None:
            flat, base, clock = slot.hot_path()
            index_at, stage_at, since_at = base + ROW_INDEX, base + ROW_STAGE, base + ROW_SINCE
            flat[stage_at] = STAGE_FETCH
        try:
            if slot is None:
                for index in indices:
                    samples.append(dataset[index])
            else:
                for index in indices:
                    flat[index_at] = index if type(index) is int else NO_INDEX
                    flat[since_at] = clock()
                    samples.append(dataset[index])
                flat[base + ROW_SAMPLES] += len(indices)
        except Exception as error:  # the user's dataset raises anything
            self._batch_failed(error, indices, samples, index)
            raise
        except SystemExit as exiting:
            record_exit(context.stack_log, exiting)
            raise
        context.loading.loaded(index)
        return samples

    def _batch_failed(
        self, error: Exception, indices: list[Any], samples: list[Any], index: Any
    ) -> None:
        """A batch fetched at once failed at ``index``: the error is tagged with it, the batch
        and the last sample that loaded, and the recorder's row says so."""
        context = self.context
        if context.slot is not None:
            context.slot.error()
        loaded = indices[len(samples) - 1] if samples else context.loading.last_loaded
        tag_exception(
            error, context.worker_id, index=index, stage="fetch", batch=list(indices), loaded=loaded
        )
        context.loading.failed()

    def _quarantined(self, index: Any) -> bool:
        """Quarantined when this worker's pool started (its policy) or since: the main process
        quarantines while live workers run (``live_quarantine``), so this is asked just before
        each sample is fetched, never once for the life of the worker."""
        policy = self.policy
        return (
            policy is not None and index in policy.quarantined
        ) or index in self.context.quarantine

    def _left_out(self, indices: list[Any]) -> list[Any]:
        """The batch's samples, each fetched unless it is quarantined (then left out, and
        said); exceptions raise as without healing. ``DroppedSamples`` when none is left."""
        context = self.context
        context.outbox.batch = []
        slot = context.slot
        kept: list[Any] = []
        samples: list[Any] = []
        index = None
        context.loading.begin(kept)
        try:
            for index in indices:
                if self._quarantined(index):
                    _say_quarantined(context.outbox, index)
                    continue
                if slot is not None:
                    slot.fetching(index)
                samples.append(self.dataset[index])
                kept.append(index)
        except Exception as error:  # the user's dataset raises anything
            self._batch_failed(error, indices, samples, index)
            raise
        except SystemExit as exiting:
            record_exit(context.stack_log, exiting)
            raise
        context.loading.loaded(index)
        return samples if samples else DroppedSamples([])

    def _fetch(self, index: Any, retries: int) -> tuple[bool, Any]:
        """(True, sample) or (False, failure) after ``retries`` further attempts."""
        slot = self.context.slot
        for attempt in range(retries + 1):
            if slot is not None:
                slot.fetching(index)
            try:
                return True, self.dataset[index]
            except Exception as error:  # the user's dataset raises anything
                if slot is not None:
                    slot.error()
                if attempt == retries:
                    return False, _failure(error, index, attempt + 1, "fetch")
            except SystemExit as exiting:
                record_exit(self.context.stack_log, exiting)
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _substitute(self, index: Any, policy: SamplePolicy) -> tuple[Any, Any] | None:
        """A deterministic healthy stand-in: the next index (cyclically) that loads."""
        if not isinstance(index, int) or not policy.dataset_len:
            return None
        loading = self.context.loading
        for step in range(1, min(policy.dataset_len, 64)):
            candidate = (index + step) % policy.dataset_len
            if self._quarantined(candidate) or candidate in loading.known_bad:
                continue
            ok, sample = self._fetch(candidate, 0)
            if ok:
                return candidate, sample
            loading.bad(candidate)
        return None

    def reference_votes(self, batch: list[Any]) -> dict[Any, int]:
        """The structures of a few healthy samples outside ``batch``, each with its count.

        Votes beside the batch's own samples, to tell the odd samples of a worker's first failing
        batch apart (later batches compare with the last batch that collated). Votes, not a
        verdict: one of these samples may be odd too (two ragged samples of six once made the
        reference, and the four healthy ones were skipped). The collate wrapper asks
        (``SupervisedCollate.reference_votes``, set by ``loader_view.wrap_loader``).
        """
        policy = self.policy
        if policy is None or not policy.dataset_len:
            return {}
        taken = set(batch)
        known_bad = self.context.loading.known_bad
        counts: dict[Any, int] = {}
        tried = 0
        for candidate in range(policy.dataset_len):
            if tried >= REFERENCE_SAMPLES * 3 or sum(counts.values()) >= REFERENCE_SAMPLES:
                break
            if candidate in taken or self._quarantined(candidate) or candidate in known_bad:
                continue
            tried += 1
            ok, sample = self._fetch(candidate, 0)
            if ok:
                structure = _safe_structure(sample)
                counts[structure] = counts.get(structure, 0) + 1
        return counts

    def _heal_batch(self, indices: list[Any]) -> list[Any]:
        policy = self.policy
        assert policy is not None
        context = self.context
        outbox = context.outbox
        context.loading.begin(list(indices))
        outbox.batch = []  # a batch of a worker killed mid-way is loaded again: afresh
        samples: list[Any] = []
        kept_indices: list[Any] = []
        events: list[dict[str, Any]] = []
        for index in indices:
            if self._quarantined(index):
                failure: dict[str, Any] = {"index": index, "stage": "quarantined", "attempts": 0}
            else:
                ok, result = self._fetch(index, policy.retries)
                if ok:
                    samples.append(result)
                    kept_indices.append(index)
                    continue
                failure = result
                context.loading.bad(index)
            if policy.on_error == "replace":
                found = self._substitute(index, policy)
                if found is not None:
                    substitute, sample = found
                    samples.append(sample)
                    kept_indices.append(substitute)
                    events.append({**failure, "action": "replaced", "substitute": substitute})
                    continue
            events.append({**failure, "action": "skipped"})
        for event in events:
            outbox.record(event)
        context.loading.begin(kept_indices)
        # A batch left short is delivered short, drop_last or not: its healthy samples arrive
        # exactly once (dropping it lost them; under a repeating sampler, timm's
        # MultiEpochsDataLoader, the next epoch's batch filled the gap).
        if not samples:
            return DroppedSamples(samples)
        return samples

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name: str) -> Any:
        # Dunder lookups must not be forwarded: torch probes ``hasattr(ds, "__getitems__")``.
        if name.startswith("__") or "dataset" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.dataset, name)


def _say_quarantined(outbox: EventOutbox, index: Any) -> None:
    """A quarantined sample left out of its batch: the main process counts it as skipped
    when the batch is delivered (it was diagnosed when it was quarantined)."""
    outbox.record({"index": index, "stage": "quarantined", "attempts": 0, "action": "skipped"})


class SupervisedBatchedMapDataset(SupervisedMapDataset):
    """For datasets that fetch a whole batch at once with their own ``__getitems__``."""

    def __getitems__(self, indices: list[Any]) -> Any:
        context = self.context
        if context.quarantine.grown():
            # The dataset loads the batch at once: its quarantined samples are left out first.
            context.outbox.batch = []
            kept = [index for index in indices if not self._quarantined(index)]
            if len(kept) < len(indices):
                for index in indices:
                    if index not in kept:
                        _say_quarantined(context.outbox, index)
                indices = kept
                if not kept:
                    context.loading.begin([])
                    return DroppedSamples([])
        slot = context.slot
        if slot is not None and indices:
            slot.fetching(indices[0])
        context.loading.begin(list(indices))
        try:
            return self.dataset.__getitems__(indices)
        except Exception as error:  # the user's __getitems__ raises anything
            culprit = self._culprit_alone(indices)
            if slot is not None:
                slot.error()
            tag_exception(
                error, context.worker_id, index=culprit, stage="fetch", batch=list(indices)
            )
            context.loading.failed()
            raise

    def _culprit_alone(self, indices: list[Any]) -> Any:
        """The first of ``indices`` whose ``dataset[index]`` raises alone, or None.

        A batched fetch fails as one call, so which sample raised is unknown (HF datasets' first
        index was named). On this error path alone each sample is fetched by
        itself, the recorder naming it, so a crash here names its sample too; where none raises
        alone (the batch's failure is the batch's), no index is named, never a wrong one.
        """
        slot = self.context.slot
        for index in indices:
            if slot is not None:
                slot.fetching(index)
            try:
                self.dataset[index]
            except Exception:  # the user's dataset: any exception names it
                return index
        return None


_NOT_PASSED = (
    "a generator ends when it raises: the rest of this worker's stream after item #{position} "
    "is lost (re-reading the stream raised there again); raise inside a loop that catches the "
    "error per item, or make __iter__ return an iterator object whose __next__ can go on"
)


_STATEFUL_METHODS = ("state_dict", "load_state_dict")


class _SupervisedIterator:
    """One worker's stream: counts positions (skipped items included), skips bad items, and
    resumes a re-started worker's stream where the user's copy stands (``StreamResume``)."""

    def __init__(
        self,
        dataset: Any,
        policy: SamplePolicy | None,
        resume: StreamResume | None,
        worker_id: int | None,
        slot: WorkerSlot | None,
        outbox: EventOutbox,
    ) -> None:
        self.dataset = dataset
        self.policy = policy
        self.resume = resume
        # the worker's, not its context: the context holds this stream (no reference cycle)
        self.worker_id = worker_id
        self.slot = slot
        self.outbox = outbox
        self.position = 0
        self.mark = 0  # the position the batch being collected began at
        # The items of the batch being collected (their keys are taken once per batch, for the
        # last few only), and the positions in it that returned no item (skipped, dropped).
        self.items: list[Any] = []
        self.gaps: set[int] = set()
        self.notes: list[str] = []
        self.culprits: list[tuple[int, Any]] = []  # (position, key) of culprits re-tried
        self.done = False
        self.stateful = is_stateful(dataset)
        self.expected: dict[int, Any] = {}
        if resume is not None:
            self.expected = dict(resume.keys)
            if resume.ended:
                self.done = True
            elif resume.base is not None:  # its loader restored the stream
                self.position = self.mark = resume.base
            elif resume.state is not None and self.stateful:
                try:
                    dataset.load_state_dict(resume.state)
                except Exception as error:  # the user's protocol: replay instead
                    self._state_off(error)
                else:
                    self.position = self.mark = resume.skip
        # Names items a pipeline's later stages drop the key of, or die on (WebDataset), and the
        # chunk or shard file a streaming library reads an item from (litdata, MosaicML)
        self.names = NameTrail(slot)
        self.library_names = LibraryNames(slot)
        self.library_names.attach(dataset)
        self.iterator: Iterator[Any] = (
            iter(()) if self.done else self.names.open(dataset, self.position)
        )
        if resume is not None and not resume.replayable and resume.skip and resume.state is None:
            self.notes.append(
                f"stream of worker {self.worker_id} is not replayable (the dataset says "
                f"loaderdoctor_replayable=False): up to {resume.skip} items may be duplicated "
                "or lost"
            )

    def __iter__(self) -> _SupervisedIterator:
        return self

    def __getattr__(self, name: str) -> Any:
        # torchdata saves and restores a Stateful iterator of the dataset: this stream stands in
        # for it, so it is Stateful exactly when the dataset's own iterator is
        if name in _STATEFUL_METHODS and "iterator" in self.__dict__:
            return getattr(self.iterator, name)
        raise AttributeError(name)

    def _counted_already(self, position: int) -> bool:
        resume = self.resume
        return resume is not None and (position < resume.skip or position in resume.reported)

    def __next__(self) -> Any:
        slot = self.slot
        resume = self.resume
        if slot is not None:
            # Inlined per item (a few item writes): samples_started is position + 1, so the
            # parent reads the position of the item in flight from it.
            flat, base, clock = slot.hot_path()
            flat[base + ROW_INDEX] = NO_INDEX
            samples_at, stage_at, since_at = base + ROW_SAMPLES, base + ROW_STAGE, base + ROW_SINCE
        while True:  # a loop, not a recursion: a stream may hold thousands of bad records in a row
            position = self.position
            if resume is not None and resume.stop is not None and position >= resume.stop:
                self.done = True  # the item there killed this worker twice: never read again
            if self.done:
                self.outbox.flush()
                raise StopIteration
            if slot is not None:
                flat[samples_at] = position + 1
                flat[stage_at] = STAGE_FETCH
                flat[since_at] = clock()
            try:
                item = next(self.iterator)
            except StopIteration:
                self.done = True
                self.outbox.flush()  # skips at the stream's end: no batch may follow to carry them
                if slot is not None:
                    slot.stage(Stage.IDLE)
                raise
            except Exception as error:  # the user's stream raises anything
                self.position += 1
                self.gaps.add(position)
                if slot is not None:
                    slot.error()
                if self._counted_already(position):
                    self._go_on_after(position, error, report=False)
                    continue
                if self.policy is None:
                    named = self.library_names.tags(position)
                    tag_exception(error, self.worker_id, position=position, stage="fetch", **named)
                    raise
                self._go_on_after(position, error, report=True)
                continue
            self.position += 1
            if resume is not None and position in resume.culprits:
                # in flight at a death and re-tried: it loaded, so it arrives; its key names it
                self.culprits.append((position, self._key(position, item)))
            elif resume is not None and self._counted_already(position):
                if position < resume.skip:
                    self._check_replay(position, item)
                # else: skipped before the death, counted as skipped: it stays skipped
                if self.items:
                    self.gaps.add(position)
                else:
                    self.mark = self.position  # the batch begins after what is dropped
                continue
            self.items.append(item)
            return item

    def _check_replay(self, position: int, item: Any) -> None:
        expected = self.expected.pop(position, None)
        if expected is None:
            return
        key = self._key(position, item)
        if key != expected:
            self.expected.clear()  # said once
            skip = self.resume.skip if self.resume else 0
            self.notes.append(not_replayed_note(self.worker_id, position, expected, key, skip))

    def _go_on_after(self, position: int, error: BaseException, report: bool) -> None:
        """After a bad item: record the skip, and re-open a generator that the error ended."""
        ended = inspect.isgenerator(self.iterator) and self.iterator.gi_frame is None
        recovered = not ended or self._reopen_past(position)
        if report:
            failure = _failure(error, None, 1, "fetch")
            event = {**failure, "position": position, "action": "skipped"}
            if not recovered:  # the rest of this worker's stream is lost, and said
                event["note"] = _NOT_PASSED.format(position=position)
                event["action"] = "lost"
            self.outbox.record(event)
            # Written now, not with the next batch: a death before that batch would take the
            # skip with it, and the resumed stream would read the item again and deliver it,
            # one skip reported and one delivery for the same item.
            self.outbox.flush()
        if not recovered:
            self.done = True

    def _reopen_past(self, position: int) -> bool:
        """Re-create the stream (as torch does) and read it up to just past ``position``.

        False when the re-read raises at ``position`` again or ends before it: a generator cannot
        be read past an item that raises.
        """
        try:
            self.iterator = self.names.open(self.dataset, 0)
        except Exception:  # the user's stream: a replay that fails is no replay
            return False
        for _ in range(position + 1):
            try:
                next(self.iterator)
            except StopIteration:
                return False
            except Exception:  # the user's stream raises anything
                if inspect.isgenerator(self.iterator) and self.iterator.gi_frame is None:
                    return False
        return True

    def take_batch(self, batch: Any, worker_id: int) -> StreamBatch:
        """``batch`` with the positions (and keys) collected since the last call."""
        wrapped = StreamBatch(
            batch,
            worker_id,
            self.mark,
            self.position,
            len(self.items),
            self._recent_keys(),
            self.state(),
            tuple(self.notes),
            tuple(self.culprits),
            tuple(self.outbox.take_batch()),
        )
        self.mark = self.position
        self.items, self.gaps, self.notes, self.culprits = [], set(), [], []
        self.names.forget_before(self.position)
        return wrapped

    def _recent_keys(self) -> tuple[tuple[int, Any], ...]:
        """(position, key) of the batch's last ``CHECKED_KEYS`` items that have a key."""
        items = self.items
        if not items:
            return ()
        positions = [p for p in range(self.mark, self.position) if p not in self.gaps]
        pairs = zip(positions[-CHECKED_KEYS:], items[-CHECKED_KEYS:])
        return tuple((p, key) for p, item in pairs if (key := self._key(p, item)) is not None)

    def _key(self, position: int, item: Any) -> Any:
        """The key its pipeline named the item by (a WebDataset ``__key__``, kept where a later
        stage dropped it: ``.to_tuple(...)``), else the item's own."""
        key = self.names.key_at(position)
        return key if key is not None else item_key(item)

    def state(self) -> Any:
        if not self.stateful:
            return None
        try:
            return self.dataset.state_dict()
        except Exception as error:  # the user's protocol: its stream resumes by replay
            self._state_off(error)
            return None

    def _state_off(self, error: BaseException) -> None:
        """The dataset's own state cannot be saved or restored as torchdata's protocol says:
        stop calling it, and tell the parent once (the stream resumes by replay)."""
        self.stateful = False
        self.outbox.record(containment.event("stream-state", error))


class SupervisedIterableDataset(IterableDataset[Any]):
    """Forwards to the user's IterableDataset and records the position in each worker's stream."""

    def __init__(self, dataset: Any, policy: SamplePolicy | None = None) -> None:
        self.dataset = dataset
        self.policy = policy
        self.context = WorkerContext()  # the real one comes from ``loader_view.attach_context``

    def __iter__(self) -> Iterator[Any]:
        context = self.context
        stream = _SupervisedIterator(
            self.dataset,
            self.policy,
            context.loading.take_resume(),
            context.worker_id,
            context.slot,
            context.outbox,
        )
        context.loading.open_stream(stream)  # for the collate wrapper
        return stream

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "dataset" not in self.__dict__:
            raise AttributeError(name)
        stream = self.context.loading.stream
        if name == "state_dict" and stream is not None and stream.iterator is self.dataset:
            # A dataset that is its own iterator: torchdata saves its state once, as the
            # iterator's (dataset_state None); this wrapper is not its own iterator
            return _no_state
        return getattr(self.dataset, name)


def _no_state() -> None:
    return None
