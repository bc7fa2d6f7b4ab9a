"""Failures that are not the samples': one failure every sample shares, or more skips than the
user's budget.

Healing skips a sample that raises, on the belief that the sample is bad. When the same failure
(exception type and message, numbers, paths and addresses masked) hits sample after sample with
nothing delivered between, the belief is wrong: CUDA used in a worker on a machine without a GPU
driver, a data root that does not exist, a package the workers cannot import. Skipping on would
quarantine the whole dataset and report the run healed. ``SharedFailures`` watches the failures
and the deliveries (plain data in, a ``Stop`` or None out) and says when healing must stop;
``stop_diagnosis`` turns that into the verdict the user sees.
"""

from __future__ import annotations

import math
import re
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loaderdoctor import cpython_compat
from loaderdoctor.forensics.catalog import CAUSES
from loaderdoctor.forensics.evidence import Diagnosis

SHARED_CAUSE = "shared-failure"
# Distinct samples failing alike, with no sample delivered between, that make a failure shared.
# Eight: a real run of bad files is rarely that long unbroken under a shuffled sampler, and a
# shared failure costs at most eight innocent samples before it is named.
SHARED_STREAK = 8
# The default max_skipped: a run that skips more than half the samples it tried is not being
# healed, whatever the failures say.
DEFAULT_MAX_SKIPPED = 0.5
# A fraction of the samples tried (where the dataset has no length) is judged only past this many
# tried: the first failure alone is 100% of what was tried.
MIN_TRIED_FOR_FRACTION = 32

_MASKS = (
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:[/\\][^\s'\"/\\:,;()\[\]]+)+[/\\]?"), "<path>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)


def normalise(exception_type: str | None, message: str | None) -> str:
    """The failure's signature: its type and message with numbers, paths and addresses masked,
    so that ``No such file: '/data/17.jpg'`` and ``No such file: '/data/18.jpg'`` are one."""
    text = " ".join((message or "").split())
    if exception_type and text.startswith(f"{exception_type}:"):
        text = text[len(exception_type) + 1 :].strip()
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    return f"{exception_type or 'Exception'}: {text}"


@dataclass(frozen=True)
class LikelyCause:
    """A row of the table that names what a shared message most likely means."""

    pattern: re.Pattern[str]
    text: str


LIKELY_CAUSES = (
    LikelyCause(
        re.compile(r"NVIDIA driver|CUDA driver|no CUDA GPUs|not compiled with CUDA|CUDA", re.I),
        "CUDA used in the Dataset or a transform, where the workers have no usable GPU (no "
        "NVIDIA driver on this machine, or CUDA in a forked worker): load on the CPU and move "
        "each batch to the GPU in the training loop",
    ),
    LikelyCause(
        re.compile(r"^(ModuleNotFoundError|ImportError):", re.M),
        "an import every sample needs fails (a package missing where the workers run)",
    ),
    LikelyCause(
        re.compile(r"^(FileNotFoundError|NotADirectoryError):|No such file or directory", re.M),
        "a file root that does not exist (a wrong data path, an unmounted volume): every "
        "sample's file is missing",
    ),
    LikelyCause(
        re.compile(r"^PermissionError:|Permission denied", re.M),
        "the data root cannot be read by this user",
    ),
)
GENERIC_CAUSE = (
    "a bug in the Dataset or a transform, or a wrong argument to it, that every sample meets"
)


def likely_cause(signature: str) -> str:
    for row in LIKELY_CAUSES:
        if row.pattern.search(signature):
            return row.text
    return GENERIC_CAUSE


@dataclass(frozen=True)
class Budget:
    """``max_skipped``: how many samples healing may skip, as a count or a fraction (1.0: all
    of them, and no failure, however shared, stops healing)."""

    count: int | None = None
    fraction: float | None = None

    @classmethod
    def parse(cls, value: object) -> Budget:
        """A count (an int >= 0) or a fraction (a float in (0, 1]); ValueError otherwise.
        A string from the command line is read as one or the other."""
        if isinstance(value, str):
            text = value.strip()
            try:
                value = int(text) if text.isdigit() else float(text)
            except ValueError:
                raise ValueError(
                    f"max_skipped must be a count or a fraction in (0, 1], got {text!r}"
                ) from None
        if isinstance(value, bool):
            raise ValueError(f"max_skipped must be a count or a fraction in (0, 1], got {value!r}")
        if isinstance(value, int):
            if value < 0:
                raise ValueError(f"max_skipped must be 0 or more samples, got {value}")
            return cls(count=value)
        if isinstance(value, float) and math.isfinite(value) and 0 < value <= 1:
            return cls(fraction=value)
        raise ValueError(f"max_skipped must be a count or a fraction in (0, 1], got {value!r}")

    def limit(self, dataset_len: int | None, tried: int) -> int | None:
        """The most samples that may be skipped now (None: no judgement yet)."""
        if self.count is not None:
            return self.count
        assert self.fraction is not None
        if dataset_len is not None:
            return math.floor(self.fraction * dataset_len)
        if tried < MIN_TRIED_FOR_FRACTION:
            return None
        return math.floor(self.fraction * tried)

    def describe(self) -> str:
        if self.count is not None:
            return f"max_skipped={self.count}"
        return f"max_skipped={self.fraction:g}"


DEFAULT_BUDGET = Budget(fraction=DEFAULT_MAX_SKIPPED)


@dataclass(frozen=True)
class Stop:
    """Healing must stop: why (``shared``: one failure on a streak of samples; ``budget``: more
    samples skipped than allowed), the failure most seen, and the samples it names."""

    reason: str
    signature: str
    example: str  # one raw message of the signature, as the worker raised it
    samples: tuple[Any, ...]  # the streak's samples (shared), or every one skipped (budget)
    skipped: int
    limit: int | None
    budget: str
    likely: str
    # every sample skipped so far with the failure most seen, the streak's and before: none is
    # to blame once the failure is found shared
    alike: tuple[Any, ...] = ()


@dataclass
class SharedFailures:
    """Watches failed samples and delivered ones; says when healing must stop (then sticky)."""

    budget: Budget = DEFAULT_BUDGET
    dataset_len: int | None = None
    streak: int = SHARED_STREAK
    stopped: Stop | None = None
    delivered_samples: int = 0
    _streak_signature: str | None = None
    _streak_samples: dict[Any, None] = field(default_factory=dict)
    _skipped: dict[Any, str] = field(default_factory=dict)  # sample -> its signature
    _examples: dict[str, str] = field(default_factory=dict)

    def delivered(self, samples: int) -> None:
        """Samples reached the user: a streak of failures is broken."""
        if samples > 0:
            self.delivered_samples += samples
            self._streak_signature = None
            self._streak_samples.clear()

    def failed(self, sample: Any, exception_type: str | None, message: str | None) -> Stop | None:
        """A sample failed and was skipped; the ``Stop`` when healing must stop now."""
        if self.stopped is not None:
            return self.stopped
        if self.budget.fraction == 1.0:  # every sample may be skipped: the user's word
            return None
        signature = normalise(exception_type, message)
        self._examples.setdefault(signature, " ".join((message or "").split()))
        key = sample if _hashable(sample) else repr(sample)
        self._skipped[key] = signature
        if signature != self._streak_signature:
            self._streak_signature = signature
            self._streak_samples.clear()
        self._streak_samples[key] = None
        if len(self._streak_samples) >= self.streak:
            self.stopped = self._stop("shared", signature, tuple(self._streak_samples), None)
            return self.stopped
        tried = self.delivered_samples + len(self._skipped)
        limit = self.budget.limit(self.dataset_len, tried)
        if limit is not None and len(self._skipped) > limit:
            common = Counter(self._skipped.values()).most_common(1)[0][0]
            self.stopped = self._stop("budget", common, tuple(self._skipped), limit)
        return self.stopped

    def _stop(
        self, reason: str, signature: str, samples: tuple[Any, ...], limit: int | None
    ) -> Stop:
        return Stop(
            reason=reason,
            signature=signature,
            example=self._examples[signature],
            samples=samples,
            skipped=len(self._skipped),
            limit=limit,
            budget=self.budget.describe(),
            likely=likely_cause(signature),
            alike=tuple(key for key, seen in self._skipped.items() if seen == signature),
        )


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _shown(samples: tuple[Any, ...], most: int = 16) -> str:
    ordered = sorted(samples, key=_numeric_first)
    text = ", ".join(repr(s) for s in ordered[:most])
    return text + (", …" if len(ordered) > most else "")


def _numeric_first(value: Any) -> tuple[int, Any]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (0, value)
    return (1, repr(value))


def stop_diagnosis(stop: Stop, epoch: int | None, inherited: list[str] | None = None) -> Diagnosis:
    """The verdict of a stop: the failure is not the samples'; it names the shared message, and
    what the workers inherit from the main process that can share it (``inherited_state``)."""
    cause = CAUSES[SHARED_CAUSE]
    if stop.reason == "shared":
        head = (
            f"{len(stop.samples)} different samples failed with the same error, with no sample "
            f"delivered between: {stop.example}"
        )
    else:
        head = (
            f"{stop.skipped} samples were skipped, more than {stop.budget} allows "
            f"({stop.limit}); the most common error: {stop.example}"
        )
    likely = stop.likely
    if inherited and likely == GENERIC_CAUSE:
        likely = "what the workers inherit from the main process, named below"
    evidence = [
        head,
        f"likely cause: {likely}",
        *(f"inherited from the main process: {note}" for note in inherited or []),
        f"samples: {_shown(stop.samples)}",
        "healing stopped: skipping on would blame samples for a failure they share",
    ]
    return Diagnosis(
        cause=cause.id,
        title=cause.title,
        confidence=0.9,
        worker_id=None,
        pid=None,
        signal=None,
        exit_code=None,
        indices=[],
        evidence=evidence,
        fixes=list(cause.fixes),
        explanation=cause.explanation,
        epoch=epoch,
        docs=cause.docs_url,
    )


def mostly_alike(failures: Sequence[tuple[str | None, str | None]], tried: int) -> str | None:
    """A scan's rule: when one failure (``(exception type, message)`` per failed sample,
    normalised) is more than half of the ``tried`` samples, past ``MIN_TRIED_FOR_FRACTION``, the
    sentence that says it is shared; else None. Bad files are rarely most of a dataset; a data
    root, a handle or a server the samples share is."""
    if tried < MIN_TRIED_FOR_FRACTION or not failures:
        return None
    counts = Counter(normalise(kind, message) for kind, message in failures)
    signature, count = counts.most_common(1)[0]
    if 2 * count <= tried:
        return None
    return (
        f"{count} of the {tried} samples tried failed the same way ({signature}): the failure is "
        f"shared, not the samples' (likely cause: {likely_cause(signature)}); the scan stopped, "
        "and no quarantine file is written"
    )


# Distinct shapes at one place of the samples that make a field ragged by design (boxes per
# image, tokens per sentence): one odd sample beside good ones shows two shapes, no more.
RAGGED_SHAPES = 3


@dataclass(frozen=True)
class Ragged:
    """A field whose tensors differ in shape from sample to sample: ``position`` (the n-th
    tensor of a sample), the shapes seen there, and the samples skipped for it."""

    position: int
    shapes: tuple[tuple[int, ...], ...]
    first: tuple[tuple[int, ...], tuple[int, ...]]  # the first differing pair seen (kept, odd)
    samples: tuple[Any, ...]
    example: str


@dataclass
class RaggedFields:
    """Watches the samples skipped because their batch did not collate: when one place of the
    samples holds many shapes, each sample is fine and the batch's collating is the failure."""

    threshold: int = RAGGED_SHAPES
    stopped: Ragged | None = None
    _shapes: dict[int, dict[tuple[int, ...], None]] = field(default_factory=dict)
    _first: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    _samples: dict[Any, None] = field(default_factory=dict)

    def skipped(self, sample: Any, shapes: Any, message: str | None) -> Ragged | None:
        """A sample skipped from a batch that did not collate, with its tensor shapes and a kept
        sample's (``{"odd": [...], "kept": [...]}``); the ``Ragged`` when healing must stop."""
        if self.stopped is not None:
            return self.stopped
        odd, kept = _shape_lists(shapes, "odd"), _shape_lists(shapes, "kept")
        if odd is None or kept is None or len(odd) != len(kept):
            return None
        self._samples[sample if _hashable(sample) else repr(sample)] = None
        for position, (mine, theirs) in enumerate(zip(odd, kept)):
            if mine == theirs or len(mine) != len(theirs):
                continue
            seen = self._shapes.setdefault(position, {})
            seen.update({theirs: None, mine: None})
            self._first.setdefault(position, (theirs, mine))
            if len(seen) >= self.threshold:
                self.stopped = Ragged(
                    position=position,
                    shapes=tuple(seen),
                    first=self._first[position],
                    samples=tuple(self._samples),
                    example=" ".join((message or "").split()),
                )
        return self.stopped


def _shape_lists(shapes: Any, key: str) -> list[tuple[int, ...]] | None:
    value = shapes.get(key) if isinstance(shapes, dict) else None
    if not isinstance(value, list):
        return None
    try:
        return [tuple(int(size) for size in shape) for shape in value]
    except (TypeError, ValueError):
        return None


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(size) for size in shape) + "]"


def ragged_diagnosis(ragged: Ragged, epoch: int | None) -> Diagnosis:
    """The verdict of a ragged field: a collate problem, not the samples'; none is quarantined."""
    cause = CAUSES["collate-error"]
    kept, odd = ragged.first
    shapes = ", ".join(_shape_text(shape) for shape in ragged.shapes[:8])
    evidence = [
        "each sample loads fine alone; only collating them together fails: tensor "
        f"#{ragged.position} of a sample is {_shape_text(kept)} in one and {_shape_text(odd)} in "
        f"another (first differing shapes)",
        f"{len(ragged.shapes)} different shapes at that place ({shapes}): the field is ragged by "
        "design, and every batch that mixes them fails the same way",
        f"what collate_fn raised: {ragged.example}",
        f"samples skipped for it so far, none quarantined: {_shown(ragged.samples)}",
        "healing stopped: skipping on would drop the valid samples of every batch, every epoch",
    ]
    fixes = [
        "Give the DataLoader a collate_fn that handles samples of different shapes: keep the "
        "ragged field as a list (`collate_fn=lambda batch: tuple(zip(*batch))`, as torchvision's "
        "detection references do), or pad it to the longest in the batch "
        "(`torch.nn.utils.rnn.pad_sequence`) and return the lengths.",
        "Or make every sample the same shape in the Dataset (pad or crop to a fixed size).",
    ]
    return Diagnosis(
        cause=cause.id,
        title="collate_fn cannot batch samples of different shapes (the batch's failure, "
        "not a sample's)",
        confidence=0.9,
        worker_id=None,
        pid=None,
        signal=None,
        exit_code=None,
        indices=[],
        evidence=evidence,
        fixes=fixes,
        explanation=cause.explanation,
        epoch=epoch,
        docs=cause.docs_url,
    )


def shared_by_the_workers(
    diagnosis: Diagnosis, control_note: str, inherited: list[str] | None = None
) -> Diagnosis:
    """The verdict when a sample's re-try alone failed and so did the control's: the failure is
    shared, not the sample's; ``inherited``: what the workers inherit that can share it
    (``inherited_state``). The death's own evidence follows the control's finding."""
    cause = CAUSES[SHARED_CAUSE]
    suspects = [f"inherited from the main process: {note}" for note in inherited or []]
    return Diagnosis(
        cause=cause.id,
        title=cause.title,
        confidence=0.9,
        worker_id=diagnosis.worker_id,
        pid=diagnosis.pid,
        signal=diagnosis.signal,
        exit_code=diagnosis.exit_code,
        indices=[],
        evidence=[
            control_note,
            *suspects,
            f"what each worker showed: {diagnosis.title}",
            *diagnosis.evidence,
        ],
        fixes=list(cause.fixes),
        explanation=cause.explanation,
        batch=diagnosis.batch,
        epoch=diagnosis.epoch,
        python_stack=diagnosis.python_stack,
        docs=cause.docs_url,
    )


# The verdicts that blame the sample in flight, which inherited state can make every sample meet
BLAMES_THE_SAMPLE = frozenset({"sample-error", "worker-hang", "native-crash"})
MAX_SUSPECTS = 3
_SUSPECT = "the dataset holds what every worker inherits from the main process"


def suspect_inherited(diagnosis: Diagnosis, inherited: list[str]) -> None:
    """A verdict that blames a sample, where the dataset holds state every worker inherits
    (``inherited_state``): with no control to clear the sample (healing off, or stopped), the
    verdict names that state beside the sample and says to rule it out before the sample."""
    if diagnosis.cause not in BLAMES_THE_SAMPLE or not inherited:
        return
    if any(line.startswith(_SUSPECT) for line in diagnosis.evidence):
        return  # named already, where the worker's exception was read
    diagnosis.evidence.extend(
        f"{_SUSPECT}, which can fail every sample alike: {note}"
        for note in inherited[:MAX_SUSPECTS]
    )
    diagnosis.fixes.insert(
        0,
        "Before blaming the sample: the dataset holds state its workers inherit (named in the "
        "evidence). Run `dataset[INDEX]` in the main process; if it loads there, make that "
        "state per worker (open it lazily in __getitem__ or worker_init_fn).",
    )
    diagnosis.confidence = min(diagnosis.confidence, 0.6)


# How deep the dataset's attributes are searched: dataset.db, dataset.reader.env
INHERITED_DEPTH = 2


def inherited_state(dataset: Any, depth: int = INHERITED_DEPTH) -> list[str]:
    """What a worker inherits from the main process through the dataset that can make every
    sample fail alike: a semaphore or lock (and whether it is taken now), a Manager proxy, a
    handle of a kind lint's LD106 knows (an LMDB environment, a sqlite3 connection, a file, a
    socket); and a lock of the dataset's module held by a thread now. One line each."""
    notes: list[str] = []
    seen: set[int] = set()
    level = [("self", dataset)]
    for _ in range(depth):
        below = []
        for path, owner in level:
            for name, value in _attributes_of(owner):
                where = f"{path}.{name}"
                if id(value) in seen:
                    continue
                seen.add(id(value))
                note = _inherited_note(value)
                if note is not None:
                    notes.append(f"{where}, {note}")
                elif not isinstance(value, (str, bytes, int, float, bool, type(None))):
                    below.append((where, value))
        level = below
    return notes + _held_module_locks(sys.modules.get(type(dataset).__module__))


def _held_module_locks(module: Any) -> list[str]:
    """The threading locks among a module's globals held now (a dataset guarded by one)."""
    if module is None:
        return []
    return [
        f"{name} (a global of {module.__name__}), a threading lock held now by a thread of the "
        "main process: a worker forked meanwhile inherits it held, and waits for ever"
        for name, value in list(vars(module).items())[:MAX_GLOBALS]
        if _held_thread_lock(value)
    ]


def _held_thread_lock(value: Any) -> bool:
    # (an RLock cannot tell whether it is held before Python 3.14: only plain locks are asked)
    return isinstance(value, _THREAD_LOCK) and value.locked()


MAX_GLOBALS = 512
_THREAD_LOCK = type(threading.Lock())


def _attributes_of(value: Any) -> list[tuple[str, Any]]:
    try:
        return list(vars(value).items())[:64]
    except TypeError:
        return []


def _inherited_note(value: Any) -> str | None:
    """What ``value`` shares between the main process and its workers, or None."""
    from multiprocessing.managers import BaseProxy
    from multiprocessing.synchronize import Semaphore, SemLock

    if isinstance(value, Semaphore):
        free = value.get_value()
        most = cpython_compat.semaphore_slots(value)
        kind = type(value).__name__
        if most is None or free >= most:
            return f"a multiprocessing.{kind} shared by every worker ({free} free)"
        return (
            f"a multiprocessing.{kind} shared by every worker: {most - free} of its {most} slots "
            "are taken now. A worker killed while it holds a slot leaks it (the semaphore is not "
            "given back when its holder dies), and every later acquire waits for ever"
        )
    if isinstance(value, SemLock):
        return (
            f"a multiprocessing.{type(value).__name__} shared by every worker: a worker killed "
            "while it holds it leaks it, and every later acquire waits for ever"
        )
    if _held_thread_lock(value):
        return (
            "a threading lock held now by a thread of the main process: a worker forked "
            "meanwhile inherits it held, and waits for ever"
        )
    if isinstance(value, BaseProxy):
        return (
            f"a multiprocessing Manager proxy ({type(value).__name__}): every worker calls the "
            "one manager process, and when that process is gone every call fails"
        )
    handle = _handle_kind(value)
    if handle is None:
        return None
    return (
        f"{handle} opened in the main process (Dataset.__init__) and used by every worker: forked "
        "workers share its state (file offsets, locks, reader slots) and a spawned one gets a "
        "copy [LD106]. Open it lazily, once per worker (in __getitem__ or worker_init_fn)"
    )


# Handle types a worker inherits from the main process by name: the classes lint's LD106 names
# (HANDLE_OPENERS, its clients), and what its opener functions return.
_HANDLE_RESULTS = ("sqlite3.Connection", "tarfile.TarFile", "shelve.Shelf")


def _handle_kind(value: Any) -> str | None:
    from loaderdoctor.lint.rules_dataset import HANDLE_OPENERS
    from loaderdoctor.supervise.worker.shared_handles import handle_kind

    known = handle_kind(value)
    if known is not None:
        return f"a handle ({known})"
    for dotted in sorted(HANDLE_OPENERS) + list(_HANDLE_RESULTS):
        module_name, _, name = dotted.rpartition(".")
        module = sys.modules.get(module_name)
        cls = getattr(module, name, None) if module is not None and name[:1].isupper() else None
        if isinstance(cls, type) and isinstance(value, cls):
            return f"a handle ({dotted})"
    return None


__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_MAX_SKIPPED",
    "RAGGED_SHAPES",
    "SHARED_CAUSE",
    "SHARED_STREAK",
    "Budget",
    "Ragged",
    "RaggedFields",
    "SharedFailures",
    "Stop",
    "inherited_state",
    "likely_cause",
    "mostly_alike",
    "normalise",
    "ragged_diagnosis",
    "shared_by_the_workers",
    "stop_diagnosis",
    "suspect_inherited",
]
