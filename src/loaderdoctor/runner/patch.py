"""Replace torch's DataLoader by a supervised one in a process started by ``loaderdoctor run``.

Imported by the bootstrap right after ``torch`` has finished importing. Everything a process
learns goes to files under ``$LOADERDOCTOR_RUN_DIR/.incidents/``, which the parent merges:
``<pid>.jsonl`` gets one line per incident as it happens (so a process that dies hard loses
nothing it saw), ``<pid>.state.json`` the delivered counts, rewritten at most once a second and at
exit.
"""

from __future__ import annotations

import atexit
import inspect
import json
import os
import sys
import threading
import time
import types
import weakref
from typing import Any

import torch.utils.data
import torch.utils.data.dataloader

from loaderdoctor.runner.bootstrap import HANG_TIMEOUT_ENV, HEAL_ENV, RUN_DIR_ENV
from loaderdoctor.supervise import loader as supervised

INCIDENTS_DIRNAME = ".incidents"
HEAL_WARNED_FILE = "heal-unavailable"
STATE_EVERY_S = 1.0

_lock = threading.Lock()
_state: dict[str, Any] = {"loaders": 0, "batches": 0, "samples": 0, "quarantine": []}
_last_state_write = 0.0
_applied = False


def incidents_dir() -> str:
    return os.path.join(os.environ[RUN_DIR_ENV], INCIDENTS_DIRNAME)


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
            os.path.join(incidents_dir(), HEAL_WARNED_FILE), os.O_CREAT | os.O_EXCL | os.O_WRONLY
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


def _count(loader: Any, batch: Any) -> None:
    if loader.batch_size is None and loader.batch_sampler is None:
        samples: int | None = 1  # automatic batching off: every item is one sample
    else:
        samples = batch_length(batch)
        if samples is None:
            samples = loader.batch_size or 1
    with _lock:
        _state["batches"] += 1
        _state["samples"] += samples
    _write_state(force=False)


_counting_classes: dict[type, type] = {}


def _counting_class(base: type) -> type:
    cls = _counting_classes.get(base)
    if cls is None:

        def __next__(self: Any) -> Any:
            batch = base.__next__(self)  # type: ignore[attr-defined]
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
        with _lock:
            _state["loaders"] += 1
        _write_state(force=True)

    def __iter__(self) -> Any:
        iterator = super().__iter__()
        if not getattr(iterator, "_ld_run_counting", False):
            try:
                # What _count reads, not the loader: iterator -> loader would be a reference
                # cycle with persistent workers (issue 13).
                iterator._ld_run_loader = types.SimpleNamespace(
                    batch_size=self.batch_size, batch_sampler=self.batch_sampler
                )
                iterator.__class__ = _counting_class(type(iterator))
            except (TypeError, AttributeError):
                pass  # an iterator type that cannot be extended: not counted
        return iterator


def _incident_sink(loader: Any, incident: Any) -> None:
    record = {
        "time": time.time(),
        "pid": os.getpid(),
        "rank": current_rank(),
        "incident": incident.to_json(),
    }
    line = json.dumps(record, default=repr) + "\n"
    # One write of one line in append mode: lines of concurrent writers never interleave.
    with open(os.path.join(incidents_dir(), f"{os.getpid()}.jsonl"), "a") as handle:
        handle.write(line)
    _write_state(force=True)


def _write_state(force: bool) -> None:
    global _last_state_write
    now = time.monotonic()
    if not force and now - _last_state_write < STATE_EVERY_S:
        return
    _last_state_write = now
    with _lock:
        state = {**_state, "pid": os.getpid(), "rank": current_rank(), "heal": HEAL_AVAILABLE}
    for loader_report in _loader_reports():
        state["quarantine"] = sorted(
            {*state["quarantine"], *getattr(loader_report, "quarantine", [])}, key=repr
        )
    path = os.path.join(incidents_dir(), f"{os.getpid()}.state.json")
    try:
        with open(path + ".tmp", "w") as handle:
            json.dump(state, handle, default=repr)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


# Healing loaders keep a ``report`` with their quarantine; read it when the state is written.
_loaders: weakref.WeakSet[Any] = weakref.WeakSet()


def _loader_reports() -> list[Any]:
    return [r for r in (getattr(x, "report", None) for x in list(_loaders)) if r is not None]


def _at_exit() -> None:
    if _state["loaders"]:
        _write_state(force=True)


def apply() -> None:
    """Make ``torch.utils.data.DataLoader`` the supervised one, in this process, once."""
    global _applied
    if _applied or not os.environ.get(RUN_DIR_ENV):
        return
    _applied = True
    os.makedirs(incidents_dir(), exist_ok=True)
    torch.utils.data.DataLoader = RunDataLoader  # type: ignore[misc]
    torch.utils.data.dataloader.DataLoader = RunDataLoader  # type: ignore[misc]
    supervised.INCIDENT_SINKS.append(_incident_sink)
    atexit.register(_at_exit)
