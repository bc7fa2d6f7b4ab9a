"""The worker side: wrappers around the user's Dataset, collate_fn and worker_init_fn.

They write the flight recorder (which sample is in flight, which stage) and tag every Python
exception with the sample index before torch ships it to the main process. A clean sample costs a
few numpy item writes.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from torch.utils.data import Dataset, IterableDataset

from loaderdoctor import torch_compat
from loaderdoctor.recorder import (
    _FETCH,
    _INDEX,
    _SAMPLES,
    _SINCE,
    _STAGE,
    NO_INDEX,
    FlightRecorder,
    Stage,
    WorkerSlot,
)

# The parent sends this to a stuck worker to make faulthandler dump every thread's Python stack.
# A real-time signal: user code rarely installs handlers for those, unlike SIGUSR1/SIGUSR2.
STACK_DUMP_SIGNAL = signal.SIGRTMIN + 6
MARKER = "[loaderdoctor] "
BOOTSTRAP_DIR_ENV = "LOADERDOCTOR_BOOTSTRAP_DIR"


class _WorkerState:
    """Per-process state, set in the worker by ``SupervisedWorkerInit``."""

    def __init__(self) -> None:
        self.slot: WorkerSlot | None = None
        self.worker_id: int | None = None
        self.batch_indices: list[Any] = []
        self.stack_log: Any = None
        self.event_log: Any = None
        self.events: list[dict[str, Any]] = []
        self.known_bad: set[Any] = set()
        self.good_structure: Any = None  # of a sample in a batch that collated (healing)
        self.reference_fetch: Callable[[list[Any]], Any] | None = None


STATE = _WorkerState()


@dataclass(frozen=True)
class HealPolicy:
    """How a worker treats a sample that raises (travels to the workers with the dataset)."""

    on_error: str  # "skip" or "replace" ("raise" never builds a policy)
    retries: int
    quarantined: frozenset[Any]
    drop_last: bool
    dataset_len: int | None


class SkippedBatch:
    """Stands in for a batch whose every sample was skipped (or, with drop_last, left short)."""

    def __init__(self, indices: list[Any], reason: str) -> None:
        self.indices = indices
        self.reason = reason

    def __repr__(self) -> str:
        return f"SkippedBatch({self.indices!r}, {self.reason!r})"


class DroppedSamples(list[Any]):
    """What a healing ``__getitems__`` returns for a batch that must not be collated."""


EVENTS_PREFIX = "events-"
REFERENCE_SAMPLES = 5


def record_event(event: dict[str, Any]) -> None:
    """A skip or replace decided in this process, for the parent's ledger and report."""
    event["worker"] = STATE.worker_id
    if STATE.event_log is None:
        STATE.events.append(event)  # in-process loading: the parent is this process
        return
    try:
        STATE.event_log.write(json.dumps(event, default=repr) + "\n")
        STATE.event_log.flush()
    except (OSError, ValueError):
        return
    if STATE.slot is not None:
        STATE.slot.event()


def _failure(error: BaseException, index: Any, attempts: int, stage: str) -> dict[str, Any]:
    text = "".join(traceback.format_exception(error))
    return {
        "index": index,
        "stage": stage,
        "exception_type": type(error).__name__,
        "message": f"{type(error).__name__}: {error}",
        "traceback": text[-4000:],
        "errno": getattr(error, "errno", None),
        "attempts": attempts,
    }


def tag_exception(error: BaseException, **facts: Any) -> None:
    """Attach the facts (index, stage, worker) as a note; the note travels in torch's traceback."""
    facts["worker"] = STATE.worker_id
    try:
        note = MARKER + json.dumps(facts, default=repr)
    except (TypeError, ValueError):  # pragma: no cover - default=repr handles every object
        note = MARKER + json.dumps({k: repr(v) for k, v in facts.items()})
    if any(n.startswith(MARKER) for n in getattr(error, "__notes__", ())):
        return  # the innermost wrapper knows best
    error.add_note(note)


def read_tags(text: str) -> dict[str, Any]:
    """The facts of the last tag in a formatted traceback (``{}`` when there is none)."""
    for line in reversed(text.splitlines()):
        if line.startswith(MARKER):
            try:
                facts = json.loads(line[len(MARKER) :])
            except ValueError:
                return {}
            return facts if isinstance(facts, dict) else {}
    return {}


def strip_tags(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith(MARKER))


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
    except Exception:
        return None


def odd_samples(samples: Any, indices: list[Any], reference: Any = None) -> list[Any]:
    """Indices whose structure differs from the rest of the batch (empty when undecidable).

    ``reference`` is the structure of a sample known to be good (from an earlier batch or a
    reference sample): when some samples match it, the others are the odd ones, whatever their
    number. Without it the majority decides, and a tie decides nothing.
    """
    if not isinstance(samples, (list, tuple)) or len(samples) != len(indices) or len(samples) < 2:
        return []
    try:
        structures = [_structure(s) for s in samples]
    except Exception:
        return []
    if len(set(structures)) < 2:
        return []
    if reference is not None and reference in structures:
        return [index for index, s in zip(indices, structures) if s != reference]
    counts: dict[Any, int] = {}
    for structure in structures:
        counts[structure] = counts.get(structure, 0) + 1
    ranked = sorted(counts.values(), reverse=True)
    if ranked[0] == ranked[1]:
        return []
    majority = max(counts, key=lambda s: counts[s])
    return [index for index, s in zip(indices, structures) if s != majority]


class SupervisedMapDataset(Dataset[Any]):
    """Forwards to the user's map-style dataset and records which index is in flight.

    torch's fetcher calls ``__getitems__`` once per batch when a dataset has it; this wrapper
    always has it and runs the per-sample loop itself, so a clean sample costs three shared-memory
    writes and a clock read, with no extra Python call layer (it matters for tiny samples).
    """

    def __init__(self, dataset: Any, policy: HealPolicy | None = None) -> None:
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

    def _substitute(self, index: Any, policy: HealPolicy) -> tuple[Any, Any] | None:
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
    def __init__(self, iterator: Iterator[Any], policy: HealPolicy | None = None) -> None:
        self.iterator = iterator
        self.policy = policy
        self.position = 0

    def __iter__(self) -> _SupervisedIterator:
        return self

    def __next__(self) -> Any:
        slot = STATE.slot
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
            if self.policy is not None:
                # A stream cannot retry an item: skip it and read on.
                failure = _failure(error, None, 1, "fetch")
                position = self.position - 1
                record_event(
                    {**failure, "position": position, "action": "skipped", "dropped": False}
                )
                return self.__next__()
            tag_exception(error, position=self.position - 1, stage="fetch")
            raise
        self.position += 1
        return item


class SupervisedIterableDataset(IterableDataset[Any]):
    """Forwards to the user's IterableDataset and records the position in each worker's stream."""

    def __init__(self, dataset: Any, policy: HealPolicy | None = None) -> None:
        self.dataset = dataset
        self.policy = policy

    def __iter__(self) -> Iterator[Any]:
        return _SupervisedIterator(iter(self.dataset), self.policy)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "dataset" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.dataset, name)


class SupervisedCollate:
    def __init__(self, collate_fn: Callable[[Any], Any], heal: bool = False) -> None:
        self.collate_fn = collate_fn
        self.heal = heal

    def __call__(self, samples: Any) -> Any:
        slot = STATE.slot
        indices = STATE.batch_indices
        STATE.batch_indices = []
        if isinstance(samples, SkippedBatch):
            return samples
        if isinstance(samples, DroppedSamples) or (self.heal and samples == []):
            if slot is not None:
                slot.stage(Stage.IDLE)
            # ``indices`` are the healthy samples this drop leaves out (drop_last).
            return SkippedBatch(indices, "every sample was skipped or the batch was left short")
        if slot is not None:
            slot.stage(Stage.COLLATE)
        try:
            batch = self.collate_fn(samples)
        except Exception as error:
            if slot is not None:
                slot.error()
            reference = self._reference(indices) if self.heal else None
            odd = odd_samples(samples, indices, reference)
            healed = self._collate_without(samples, indices, odd, error) if self.heal else None
            if healed is not None:
                if slot is not None:
                    slot.collated()
                return healed
            if slot is not None:
                slot.stage(Stage.IDLE)
            tag_exception(error, index=None, stage="collate", batch=indices, odd=odd)
            raise
        if slot is not None:
            slot.collated()
        if self.heal and STATE.good_structure is None and isinstance(samples, list) and samples:
            STATE.good_structure = _safe_structure(samples[0])
        return batch

    def _reference(self, indices: list[Any]) -> Any:
        """A good sample's structure: from an earlier batch, else a sample outside this batch."""
        if STATE.good_structure is not None:
            return STATE.good_structure
        fetch = STATE.reference_fetch
        if fetch is None:
            return None
        return fetch(indices)

    def _collate_without(
        self, samples: list[Any], indices: list[Any], odd: list[Any], error: BaseException
    ) -> Any:
        """Collate the batch without the samples unlike the rest; None when that fails too."""
        if not odd or len(odd) >= len(samples):
            return None
        odd_set = set(map(repr, odd))
        kept = [s for s, i in zip(samples, indices) if repr(i) not in odd_set]
        try:
            batch = self.collate_fn(kept)
        except Exception:
            return None
        for index in odd:
            event = {**_failure(error, index, 1, "collate"), "action": "skipped", "dropped": False}
            record_event(event)
        return batch


class SupervisedWorkerInit:
    """Runs first in every worker: attach the recorder, arm faulthandler, then the user's init."""

    def __init__(
        self,
        user_init: Callable[[int], Any] | None,
        recorder: FlightRecorder,
        log_dir: str,
        dataset: Any,
    ) -> None:
        self.user_init = user_init
        self.recorder = recorder
        self.log_dir = log_dir
        self.dataset = dataset

    def __call__(self, worker_id: int) -> None:
        STATE.worker_id = worker_id
        STATE.batch_indices = []
        slot = self.recorder.attach(worker_id)
        STATE.slot = slot
        try:
            # One file per worker process: faulthandler writes the Python stack of every thread
            # into it at a fatal signal (SIGSEGV, SIGBUS, ...) and on STACK_DUMP_SIGNAL.
            path = os.path.join(self.log_dir, f"worker-{worker_id}-{os.getpid()}.log")
            STATE.stack_log = open(path, "w")  # must outlive this call
            # A forked worker inherits "enabled" from a parent run under pytest or -X
            # faulthandler; enable() would then only switch files and leave torch's SIGSEGV
            # handler in front. Disable first so faulthandler's handler is installed for real.
            faulthandler.disable()
            faulthandler.enable(file=STATE.stack_log, all_threads=True)
            faulthandler.register(
                STACK_DUMP_SIGNAL, file=STATE.stack_log, all_threads=True, chain=False
            )
        except (OSError, RuntimeError, ValueError):
            pass  # no stack on a crash; every other piece of evidence still works
        _report_lost_batches()
        _announce_temp_dir(self.log_dir, worker_id)
        try:
            STATE.events = []
            STATE.event_log = open(
                os.path.join(self.log_dir, f"{EVENTS_PREFIX}{worker_id}-{os.getpid()}.jsonl"), "w"
            )
        except OSError:
            STATE.event_log = None
        torch_compat.show_user_dataset_in_worker_info(self.dataset)
        if self.user_init is not None:
            try:
                self.user_init(worker_id)
            except Exception as error:
                tag_exception(error, index=None, stage="init")
                raise
        slot.stage(Stage.IDLE)


def _announce_temp_dir(log_dir: str, worker_id: int) -> None:
    """Tell the parent where multiprocessing keeps this worker's temp dir (its fd-passing socket).

    A worker that is SIGKILLed cannot remove it; the parent does, after the death.
    """
    import multiprocessing
    import multiprocessing.util

    if multiprocessing.current_process()._config.get("tempdir"):  # type: ignore[attr-defined]
        return  # inherited from the parent through fork: the parent's, not ours to remove
    try:
        temp_dir = multiprocessing.util.get_temp_dir()
        path = os.path.join(log_dir, f"tempdir-{worker_id}-{os.getpid()}.txt")
        with open(path, "w") as handle:
            handle.write(temp_dir)
    except OSError:
        pass


SEND_ERROR_HEADER = "loaderdoctor: a batch could not be sent to the main process"


def _report_lost_batches() -> None:
    """Make a batch that fails to leave the worker a recorded failure instead of a silent hang.

    The worker hands each batch to a multiprocessing.Queue whose feeder thread pickles it in the
    background. When that fails (an unpicklable object in the sample, EMFILE or ENOSPC while
    moving tensors to shared memory) the stock hook only prints a traceback: the batch is gone
    and the main process waits for it forever. This worker-local hook also bumps the recorder
    and writes the traceback where the parent looks.
    """
    import multiprocessing.queues

    queue_class: Any = multiprocessing.queues.Queue
    original = queue_class._on_queue_feeder_error

    def on_feeder_error(error: BaseException, obj: object) -> None:
        slot = STATE.slot
        log = STATE.stack_log
        if log is not None:
            try:
                log.write(SEND_ERROR_HEADER + "\n")
                log.write("".join(traceback.format_exception(error)))
                log.flush()
            except (OSError, ValueError):
                pass
        if slot is not None:
            slot.send_error()
        original(error, obj)

    queue_class._on_queue_feeder_error = staticmethod(on_feeder_error)


def write_bootstrap_marker() -> None:
    """Called when a spawned worker re-runs an unguarded main script and reaches a DataLoader.

    The parent names the missing ``if __name__ == "__main__":`` guard from this file.
    """
    directory = os.environ.get(BOOTSTRAP_DIR_ENV)
    if not directory or not os.path.isdir(directory):
        return
    main = sys.modules.get("__mp_main__") or sys.modules.get("__main__")
    script = getattr(main, "__file__", None) or "the main script"
    where = ""
    for frame in reversed(traceback.extract_stack()[:-1]):
        if script and os.path.abspath(frame.filename) == os.path.abspath(script):
            where = f" (line {frame.lineno}: {(frame.line or '').strip()})"
            break
    text = (
        f"worker pid {os.getpid()} re-ran {script} while starting and reached a DataLoader "
        f"at import{where}"
    )
    try:
        with open(os.path.join(directory, f"bootstrap-{os.getpid()}.txt"), "w") as handle:
            handle.write(text)
    except OSError:
        pass


def is_spawn_bootstrapping() -> bool:
    import multiprocessing

    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))
