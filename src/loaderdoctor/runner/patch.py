"""Replace torch's DataLoader by a supervised one in a process started by ``loaderdoctor run``.

Imported by the bootstrap right after ``torch`` has finished importing. Everything a process
learns goes to files under ``$LOADERDOCTOR_RUN_DIR/.incidents/`` (names and formats in
``protocol``), which the parent merges: one line per incident as it happens (so a process that
dies hard loses nothing it saw), and this process image's delivered counts, rewritten at most
once a second, at exit, before an ``os.exec*`` and when ``run`` itself died (``lifeline``).
"""

from __future__ import annotations

import atexit
import inspect
import os
import sys
import threading
import time
import types
import weakref
from typing import Any

import torch.utils.data
import torch.utils.data.dataloader

from loaderdoctor import torch_compat
from loaderdoctor.runner import lifeline, protocol
from loaderdoctor.runner.protocol import HANG_TIMEOUT_ENV, HEAL_ENV, HEAL_WARNED_NAME, RUN_DIR_ENV
from loaderdoctor.supervise import loader as supervised

STATE_EVERY_S = 1.0

_lock = threading.Lock()
# "created": DataLoaders built; "loaders": those iterated (see RunDataLoader.__iter__).
_state: dict[str, Any] = {"created": 0, "loaders": 0, "batches": 0, "samples": 0, "quarantine": []}
_worker_pids: set[int] = set()
_last_state_write = 0.0
_applied = False
_image = 0  # this process image's number among those of its pid (see protocol)
_started = time.time()


def incidents_dir() -> str:
    return protocol.incidents_dir(os.environ[RUN_DIR_ENV])


def current_rank() -> int | None:
    value = os.environ.get("RANK")
    return int(value) if value and value.lstrip("-").isdigit() else None


def _settings() -> tuple[float | None, bool]:
    try:
        hang = float(os.environ.get(HANG_TIMEOUT_ENV, "0"))
    except ValueError:
        hang = 0.0
    return (hang if hang > 0 else None), os.environ.get(HEAL_ENV) == "1"


HANG_TIMEOUT, HEAL = _settings()
HEAL_AVAILABLE = "heal" in inspect.signature(supervised.DataLoader.__init__).parameters


def _warn_heal_unavailable_once() -> None:
    """One warning per run, not one per rank: the first process to create the marker says it."""
    try:
        fd = os.open(
            os.path.join(incidents_dir(), HEAL_WARNED_NAME), os.O_CREAT | os.O_EXCL | os.O_WRONLY
        )
    except OSError:
        return
    os.close(fd)
    sys.stderr.write(
        "loaderdoctor run: --heal: this loaderdoctor's DataLoader cannot heal yet; "
        "failures are diagnosed and raised\n"
    )


def batch_length(batch: Any) -> int | None:
    """Samples in a collated batch: the leading dimension of its first tensor or list."""
    for _ in range(8):  # nested structures: (inputs, labels), {"image": ...}
        if isinstance(batch, torch.Tensor):
            return int(batch.shape[0]) if batch.dim() > 0 else 1
        if isinstance(batch, dict):
            if not batch:
                return None
            batch = next(iter(batch.values()))
        elif isinstance(batch, (list, tuple)):
            if not batch:
                return 0
            if isinstance(batch[0], (torch.Tensor, dict, list, tuple)):
                batch = batch[0]
            else:
                return len(batch)
        else:
            return None
    return None


def item_length(item: Any) -> int:
    """Samples in one item of a stream read with ``batch_size=None``: 1, unless it batched itself.

    A stream that batches itself (webdataset's ``.batched(4)``) yields fields that all share a
    leading dimension, the batch's: ``(images[4, 3, H, W], labels[4])``, ``{"ids": [4, 512],
    "__key__": [4 keys]}``. A single sample's fields do not (``(image[3, H, W], label[])``), or
    are all 1-D (``{"ids": [512], "mask": [512]}``, a text sample). A single sample whose fields
    happen to agree (points[N, 3] with per-point labels[N]) is counted as N: no rule can tell.
    """
    fields = list(item.values()) if isinstance(item, dict) else item
    if not isinstance(fields, (list, tuple)) or len(fields) < 2:
        return 1
    lengths, shapes = set(), set()
    for field in fields:
        if isinstance(field, torch.Tensor) and field.dim() > 0:
            lengths.add(int(field.shape[0]))
            shapes.add(field.dim())
        elif isinstance(field, list):
            lengths.add(len(field))
            shapes.add(1)
        else:
            return 1
    if len(lengths) == 1 and len(shapes) > 1:  # one leading dimension under fields of 1-D and N-D
        return lengths.pop()
    return 1


def _count(loader: Any, batch: Any) -> None:
    samples: int | None
    if loader.batch_size is None and loader.batch_sampler is None:
        # Automatic batching off: an item is a sample, or a batch that a stream made itself.
        iterable = isinstance(loader.dataset, torch.utils.data.IterableDataset)
        samples = item_length(batch) if iterable else 1
    else:
        samples = batch_length(batch)
        if samples is None:
            samples = loader.batch_size or 1
    with _lock:
        _state["batches"] += 1
        _state["samples"] += samples
    _write_state(force=False)


def _note_workers(iterator: Any) -> None:
    """Every worker process a loader ran, respawns included (read from the loader, not sampled)."""
    supervision = getattr(iterator, "_ld_sup", None)
    pids = supervision.worker_pids if supervision is not None else set()
    pids = pids | torch_compat.worker_pids(iterator)
    if not pids <= _worker_pids:
        with _lock:
            _worker_pids.update(pids)


_counting_classes: dict[type, type] = {}


def _counting_class(base: type) -> type:
    cls = _counting_classes.get(base)
    if cls is None:

        def __next__(self: Any) -> Any:
            try:
                batch = base.__next__(self)  # type: ignore[attr-defined]
            except StopIteration:
                # An epoch's end: its counts are on disk, should the process die before the
                # next write (a rank stopped by its agent runs no atexit).
                _write_state(force=True)
                raise
            _note_workers(self)
            _count(self._ld_run_loader, batch)
            return batch

        cls = type(base.__name__, (base,), {"__next__": __next__, "_ld_run_counting": True})
        cls.__module__ = base.__module__
        _counting_classes[base] = cls
    return cls


class RunDataLoader(supervised.DataLoader):
    """The DataLoader every ``torch.utils.data.DataLoader(...)`` call makes under ``run``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if HANG_TIMEOUT is not None:
            kwargs.setdefault("hang_timeout", HANG_TIMEOUT)
        if HEAL:
            if HEAL_AVAILABLE:
                kwargs.setdefault("heal", True)
            else:
                _warn_heal_unavailable_once()
        super().__init__(*args, **kwargs)
        _loaders.add(self)
        self._ld_run_iterated = False
        with _lock:
            _state["created"] += 1
        _write_state(force=True)

    def __iter__(self) -> Any:
        if not self._ld_run_iterated:
            # Counted when used, not when built: HF accelerate's prepare() builds a second
            # DataLoader from the user's and iterates only that one (one loader, not two).
            self._ld_run_iterated = True
            with _lock:
                _state["loaders"] += 1
        iterator = super().__iter__()
        _note_workers(iterator)
        _write_state(force=True)
        if not getattr(iterator, "_ld_run_counting", False):
            try:
                # What _count reads, not the loader: iterator -> loader would be a reference
                # cycle with persistent workers (issue 13).
                iterator._ld_run_loader = types.SimpleNamespace(
                    batch_size=self.batch_size,
                    batch_sampler=self.batch_sampler,
                    dataset=self.dataset,
                )
                iterator.__class__ = _counting_class(type(iterator))
            except (TypeError, AttributeError):
                pass  # an iterator type that cannot be extended: not counted
        return iterator


def _incident_sink(loader: Any, incident: Any) -> None:
    pid = getattr(getattr(incident, "diagnosis", None), "pid", None)
    if isinstance(pid, int) and pid != os.getpid():  # a worker that died before being seen
        with _lock:
            _worker_pids.add(pid)
    record = {
        "time": time.time(),
        "pid": os.getpid(),
        "rank": current_rank(),
        "incident": incident.to_json(),
    }
    protocol.append_incident(incidents_dir(), os.getpid(), record)
    _write_state(force=True)


def _write_state(force: bool, read_loaders: bool = True) -> None:
    """This image's state file; ``read_loaders``: with the healing loaders' quarantines, read
    from their reports (not from another thread: a report drains the loader's event files)."""
    global _last_state_write
    now = time.monotonic()
    if not force and now - _last_state_write < STATE_EVERY_S:
        return
    _last_state_write = now
    with _lock:
        state = {
            **_state,
            "pid": os.getpid(),
            "image": _image,
            "started": _started,
            "rank": current_rank(),
            "heal": HEAL_AVAILABLE,
            "worker_pids": sorted(_worker_pids),
        }
    for loader_report in _loader_reports() if read_loaders else []:
        state["quarantine"] = sorted(
            {*state["quarantine"], *getattr(loader_report, "quarantine", [])}, key=repr
        )
    try:
        protocol.write_json(protocol.state_path(incidents_dir(), os.getpid(), _image), state)
    except OSError:
        pass


# Healing loaders keep a ``report`` with their quarantine; read it when the state is written.
_loaders: weakref.WeakSet[Any] = weakref.WeakSet()


def _loader_reports() -> list[Any]:
    return [r for r in (getattr(x, "report", None) for x in list(_loaders)) if r is not None]


def _flush_state() -> None:
    if _state["created"]:
        _write_state(force=True)


def _flush_counts_from_another_thread() -> None:
    if _state["created"]:
        _write_state(force=True, read_loaders=False)


def _flushing_before(exec_function: Any) -> Any:
    """``os.execv``/``os.execve`` that first save the counts: an exec runs no ``atexit``."""

    def exec_after_flush(*args: Any, **kwargs: Any) -> Any:
        _flush_state()
        return exec_function(*args, **kwargs)

    exec_after_flush.__wrapped__ = exec_function  # type: ignore[attr-defined]
    return exec_after_flush


def apply() -> None:
    """Make ``torch.utils.data.DataLoader`` the supervised one, in this process, once."""
    global _applied, _image
    if _applied or not os.environ.get(RUN_DIR_ENV):
        return
    _applied = True
    os.makedirs(incidents_dir(), exist_ok=True)
    _image = protocol.next_image_number(incidents_dir(), os.getpid())
    torch.utils.data.DataLoader = RunDataLoader  # type: ignore[misc]
    torch.utils.data.dataloader.DataLoader = RunDataLoader  # type: ignore[misc]
    supervised.INCIDENT_SINKS.append(_incident_sink)
    atexit.register(_flush_state)
    lifeline.BEFORE_REPORT.append(_flush_counts_from_another_thread)
    # Every os.exec* ends in one of these two (execvp and execl* call them by name).
    os.execv = _flushing_before(os.execv)
    os.execve = _flushing_before(os.execve)
