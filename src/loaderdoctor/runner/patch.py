"""Replace torch's DataLoader by a supervised one in a process started by ``loaderdoctor run``.

Imported by the bootstrap right after ``torch`` has finished importing. Everything a process
learns goes to files under ``$LOADERDOCTOR_RUN_DIR/.incidents/`` (names and formats in
``protocol``), which the parent merges: one line per incident as it happens (so a process that
dies hard loses nothing it saw), and this process image's state: the sum of its supervised
loaders' own records (delivered counts, worker pids, quarantine; ``Supervision``), for loaders
built through torch's name and ours alike. Nothing here counts a batch: the state is rewritten
when a loader's records change (at most once a second while batches flow, at once when an epoch
starts or ends or a loader's workers stop), at exit, before an ``os.exec*``, on SIGTERM (where
the process has no handler of its own) and when ``run`` itself died (``lifeline``).

A report folder that cannot be written (full, read-only) never breaks the command: the loaders go
on supervised, and the state says it (should a later write get through) so that the report does
not pass short counts off as whole; ``run``, which writes in the same folder, warns once.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import sys
import threading
import time
import types
import weakref
from typing import Any, TypeVar

import torch.utils.data
import torch.utils.data.dataloader

from loaderdoctor.forensics.incident import FollowUp, Incident
from loaderdoctor.runner import lifeline, live, protocol, subclasses
from loaderdoctor.runner.protocol import (
    HANG_TIMEOUT_ENV,
    HEAL_ENV,
    MAX_DEATHS_ENV,
    MAX_SKIPPED_ENV,
    RAY_WORKER_ENV,
    RUN_DIR_ENV,
)
from loaderdoctor.supervise import loader as supervised

STATE_EVERY_S = 1.0

_lock = threading.RLock()  # the records are read again while the lifeline's thread writes
# DataLoaders built (those that ran as plain torch are told by their records).
_state: dict[str, Any] = {"created": 0}
_incident_pids: set[int] = set()  # workers named by an incident (one may die before it is seen)
_last_state_write = 0.0
_applied = False
_image = 0  # this process image's number among those of its pid (see protocol)
_unwritten: list[str] = []  # why this process could not write its records (said once)
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
MAX_SKIPPED = os.environ.get(MAX_SKIPPED_ENV)  # checked by ``run`` before the command started
MAX_DEATHS = os.environ.get(MAX_DEATHS_ENV)  # a whole number >= 1, checked by ``run`` too


_T_co = TypeVar("_T_co", covariant=True)


class RunDataLoader(supervised.DataLoader[_T_co]):
    """The DataLoader every ``torch.utils.data.DataLoader(...)`` call makes under ``run``.

    Generic as torch's is: ``DataLoader[int]`` and ``class X(DataLoader[T])`` (torchdata's
    ``StatefulDataLoader``, which ``accelerate`` imports whenever torchdata is installed) must work
    under ``run`` as they do without it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        subclasses.reached(self)
        if HANG_TIMEOUT is not None:
            kwargs.setdefault("hang_timeout", HANG_TIMEOUT)
        if HEAL:
            kwargs.setdefault("heal", True)
            if MAX_SKIPPED is not None:
                kwargs.setdefault("max_skipped", MAX_SKIPPED)
            if MAX_DEATHS is not None:
                kwargs.setdefault("max_deaths_in_a_row", int(MAX_DEATHS))
        super().__init__(*args, **kwargs)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # torchdata's StatefulDataLoader (and subclasses): a supervised class of the same name,
        # whose __init__ Python then runs in place of the user's class's
        cls = _supervised_stateful(cls) or cls
        loader = super().__new__(cls)
        if cls.__init__ is not RunDataLoader.__init__:  # a subclass with an __init__ of its own
            subclasses.watch(loader, on_unsupervised=_state_changed)
        return loader


# The user's code built a ``DataLoader``, and ``type(loader).__name__`` says so (a framework may log
# or check it); the module says whose it is. The alias keeps pickling by name working.
RunDataLoader.__name__ = RunDataLoader.__qualname__ = "DataLoader"
DataLoader = RunDataLoader

_stateful_classes: dict[type, type] = {}


def _supervised_stateful(cls: type) -> type | None:
    """The supervised class for a torchdata ``StatefulDataLoader`` class, or None for another."""
    module = sys.modules.get("torchdata.stateful_dataloader")
    if module is None or not issubclass(cls, module.StatefulDataLoader):
        return None
    from loaderdoctor.supervise import stateful

    if issubclass(cls, stateful.SupervisedStateful):
        return None  # already supervised (loaderdoctor's own drop-in, or this class)
    supervised_cls = _stateful_classes.get(cls)
    if supervised_cls is None:
        # Generic as the user's class is (``type(loader)[int]``, subclassing it): its type
        # parameters pass through, as ``class X(RunStateful, cls[T])`` would pass them.
        parameters = getattr(cls, "__parameters__", ())
        generic_base = cls[parameters] if parameters else cls  # type: ignore[index]
        namespace = {"__qualname__": cls.__qualname__, "__module__": cls.__module__}
        supervised_cls = types.new_class(
            cls.__name__, (_run_stateful_base(), generic_base), {}, lambda ns: ns.update(namespace)
        )
        _stateful_classes[cls] = supervised_cls
    return supervised_cls


@functools.cache
def _run_stateful_base() -> type:
    from loaderdoctor.supervise.stateful import SupervisedStateful

    class RunStateful(SupervisedStateful):
        """A StatefulDataLoader under ``run``: supervised with run's settings."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            subclasses.reached(self)
            if HANG_TIMEOUT is not None:
                kwargs.setdefault("hang_timeout", HANG_TIMEOUT)
            if HEAL:
                kwargs.setdefault("heal", True)
                if MAX_SKIPPED is not None:
                    kwargs.setdefault("max_skipped", MAX_SKIPPED)
                if MAX_DEATHS is not None:
                    kwargs.setdefault("max_deaths_in_a_row", int(MAX_DEATHS))
            super().__init__(*args, **kwargs)

    return RunStateful


def _state_changed() -> None:
    _write_state(force=True)


class LoaderRecord:
    """What ``run`` keeps of one supervised loader: copies of its own records, taken whenever
    they change, so that they outlive the loader (a loader built in a function is gone by exit).
    """

    def __init__(self, loader: Any) -> None:
        supervision = loader._ld
        self.supervision = weakref.ref(supervision)  # the loader's, never kept alive by run
        self.loader = weakref.ref(loader)
        # Why the loader runs as plain torch (its own words, the reason its warning gives), or
        # None while it is supervised: the loader decides, run only reports it.
        self.unsupervised: str | None = loader._ld_unsupervised
        # A class with an iterator of its own (litdata's StreamingDataLoader) is named with its
        # site among the unsupervised loaders, as a subclass that never reached torch's __init__
        self.own_iterator = supervised.own_iterator_reason(type(loader)) is not None
        self.name = type(loader).__qualname__
        self.site = subclasses.building_site()
        self.named = supervision.log.loader or self.site  # with the name the user gave it
        self.features_off: dict[str, str] = {}
        self.iterated = False
        self.counts: dict[str, int] = {}
        self.worker_pids: set[int] = set()
        self.quarantine: list[Any] = []
        self.oom_protection: str | None = None
        self.data_findings: list[dict[str, Any]] = []
        self.read(supervision)

    def read(self, supervision: Any, *, quarantine: bool = True) -> None:
        self.iterated = self.iterated or supervision.epoch >= 0
        self.counts = supervision.counts.as_dict()
        self.worker_pids = set(supervision.worker_pids)
        self.features_off = dict(supervision.features_off)
        if quarantine:  # not per batch: it may hold thousands of samples
            self.quarantine = list(supervision.quarantine)
        if quarantine or self.oom_protection is None:  # per batch only until workers ran
            self.oom_protection = supervision.oom_protection()
        if len(supervision.data.findings) != len(self.data_findings):
            self.data_findings = [finding.to_dict() for finding in supervision.data.findings]

    def refresh(self) -> None:
        loader = self.loader()
        if loader is not None:
            self.unsupervised = loader._ld_unsupervised
        supervision = self.supervision()
        if supervision is not None:
            self.read(supervision)


_records: list[LoaderRecord] = []
_live: live.LiveIndex | None = None  # made at the first loader


def _watch_loader(loader: Any) -> None:
    """Every supervised loader of this process, built through torch's name or ours."""
    global _live
    supervision = loader._ld
    record = LoaderRecord(loader)
    with _lock:
        _records.append(record)
        _state["created"] += 1
        if _live is None:
            _live = live.LiveIndex(incidents_dir(), current_rank())
        _live.watch(subclasses.building_site(), supervision)
    # The supervision holds the record (through this partial), never the reverse.
    supervision.watchers.append(functools.partial(_records_changed, record))
    _flush_on_sigterm()
    _write_state(force=True)


_sigterm_owner: list[int] = []  # the pid that installed the handler below


def _flush_then_die(number: int, frame: Any) -> None:
    if _sigterm_owner and os.getpid() == _sigterm_owner[0]:
        with contextlib.suppress(Exception):
            _flush_state()
    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)


def _flush_on_sigterm() -> None:
    """A rank stopped by its launcher (torchrun's agent, Slurm, Kubernetes) gets SIGTERM, and
    under Python's default disposition dies at once: no ``atexit``, its last second of counts
    never written (a killed rank showed 0 batches over a ledger of 72 samples). Where the
    process that builds a loader has no SIGTERM handler of its own, ours writes the state and
    then dies of the same signal, as it would have. Only in a process that built a loader (its
    DataLoader workers import torch too, and must stay killable by SIGTERM while stuck in
    native code), and reset in forked children."""
    if _sigterm_owner or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    _sigterm_owner.append(os.getpid())
    signal.signal(signal.SIGTERM, _flush_then_die)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_default_sigterm_in_child)


def _default_sigterm_in_child() -> None:
    with contextlib.suppress(ValueError):  # forked from a thread other than the main one
        if signal.getsignal(signal.SIGTERM) is _flush_then_die:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _records_changed(record: LoaderRecord, supervision: Any, moment: str) -> None:
    with _lock:
        record.read(supervision, quarantine=moment != "delivered")
    # An epoch's end: its counts are on disk, should the process die before the next write
    # (a rank stopped by its agent runs no atexit).
    _write_state(force=moment != "delivered")


def _incident_sink(loader: Any, incident: Incident | FollowUp) -> None:
    """One line per incident, and one per ``FollowUp`` (what was learnt about an incident after
    its line was written, which the report merges into it by the incident's id)."""
    record: dict[str, Any] = {
        "time": time.time(),
        "pid": os.getpid(),
        "image": _image,
        "rank": current_rank(),
    }
    if isinstance(incident, FollowUp):
        record[protocol.FOLLOW_UP] = incident.to_dict()
    else:
        pid = incident.diagnosis.pid
        if isinstance(pid, int) and pid != os.getpid():  # a worker that died before being seen
            with _lock:
                _incident_pids.add(pid)
        record.update(id=incident.id, incident=incident.to_dict())
    try:
        protocol.append_incident(incidents_dir(), os.getpid(), record)
    except OSError as error:
        _cannot_write(error)
    if not isinstance(incident, FollowUp):
        _write_state(force=True)


def _cannot_write(error: OSError) -> None:
    """Kept for the state (``run`` says it, once, in its own warning and the report's notes):
    the command's output stays its own, and the command goes on."""
    if not _unwritten:
        _unwritten.append(error.strerror or str(error))


def _write_state(force: bool) -> None:
    """This image's state file: the sum of its loaders' own records."""
    global _last_state_write
    now = time.monotonic()
    if not force and now - _last_state_write < STATE_EVERY_S:
        return
    _last_state_write = now
    subclasses.check_all()  # the loaders of subclasses built since: supervised or not
    with _lock:
        for record in _records:
            record.refresh()
        quarantine: set[Any] = set()
        worker_pids = set(_incident_pids)
        for record in _records:
            quarantine.update(record.quarantine)
            worker_pids |= record.worker_pids
        reasons, own_iterators = _unsupervised_records()
        state = {
            **_state,
            # supervised loaders iterated; those that ran as plain torch, by their reason
            "loaders": sum(1 for r in _records if r.iterated and r.unsupervised is None),
            "unsupervised": sum(reasons.values()),
            "unsupervised_reasons": reasons,
            "batches": sum(record.counts.get("batches", 0) for record in _records),
            "samples": sum(record.counts.get("samples", 0) for record in _records),
            "quarantine": sorted(quarantine, key=protocol.numeric_order),
            "pid": os.getpid(),
            "image": _image,
            "started": _started,
            "rank": current_rank(),
            "worker_pids": sorted(worker_pids),
            "data_findings": [f for record in _records for f in record.data_findings],
            "oom_protection": protocol.weakest_protection(
                [("", r.oom_protection) for r in _records if r.oom_protection is not None]
            ),
            "features_off": [
                {"loader": record.name, "site": record.named, "feature": f, "reason": why}
                for record in _records
                for f, why in record.features_off.items()
            ],
            "unsupervised_loaders": subclasses.unsupervised_loaders() + own_iterators,
            "unwritten": _unwritten[0] if _unwritten else None,
            # how this process was reached, where it is a Ray worker of the command's job
            "ray_worker": os.environ.get(RAY_WORKER_ENV),
            "ray_joined": _ray_joined(),
        }
    try:
        protocol.write_json(protocol.state_path(incidents_dir(), os.getpid(), _image), state)
    except OSError as error:
        _cannot_write(error)


def _ray_joined() -> list[str]:
    """The Ray clusters this process joined as a driver (``ray_hook`` saw its ``ray.init``)."""
    hook = sys.modules.get("loaderdoctor.runner.ray_hook")
    return list(getattr(hook, "joined", []))


def ray_joined() -> None:
    """This process joined a Ray cluster: on disk now, should its workers write nothing."""
    if _applied:
        _write_state(force=True)


def _unsupervised_records() -> tuple[dict[str, int], list[dict[str, Any]]]:
    """Loaders that ran as plain torch: by their reason, and those with an iterator of their own
    (named with their site, as the subclasses that never reached torch's ``__init__``)."""
    reasons: dict[str, int] = {}
    own: dict[tuple[str, str, str], int] = {}
    for record in _records:
        if record.unsupervised is None:
            continue
        if record.own_iterator:
            key = (record.name, record.site, record.unsupervised)
            own[key] = own.get(key, 0) + 1
        else:
            reasons[record.unsupervised] = reasons.get(record.unsupervised, 0) + 1
    entries = [
        {"loader": name, "site": site, "reason": reason, "count": count}
        for (name, site, reason), count in own.items()
    ]
    return reasons, entries


def _flush_state() -> None:
    if _state["created"] or subclasses.pending():
        _write_state(force=True)


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
    try:
        os.makedirs(incidents_dir(), exist_ok=True)
    except OSError as error:  # the loaders are supervised all the same
        _cannot_write(error)
    _image = protocol.next_image_number(incidents_dir(), os.getpid())
    torch.utils.data.DataLoader = RunDataLoader  # type: ignore[misc]
    torch.utils.data.dataloader.DataLoader = RunDataLoader  # type: ignore[misc]
    supervised.INCIDENT_SINKS.append(_incident_sink)
    supervised.LOADER_HOOKS.append(_watch_loader)
    atexit.register(_flush_state)
    lifeline.BEFORE_REPORT.append(_flush_state)
    # Every os.exec* ends in one of these two (execvp and execl* call them by name).
    os.execv = _flushing_before(os.execv)
    os.execve = _flushing_before(os.execve)
    sys.excepthook = _noting_uncaught(sys.excepthook)
    # Says that torch was imported and patched here, should the command fail before it builds a
    # DataLoader: the report then blames the command's own error, not the environment.
    _write_state(force=True)


def _noting_uncaught(previous: Any) -> Any:
    """``sys.excepthook`` that first notes the exception's last line in the state (the report
    says what ended the command), then hands it to the hook it replaced, unchanged."""

    def note_uncaught(kind: Any, value: Any, tb: Any) -> Any:
        try:
            text = str(value).strip().splitlines()
            with _lock:
                _state["uncaught"] = f"{kind.__name__}: {text[0]}" if text else kind.__name__
            _write_state(force=True)
        except Exception:  # never in the way of the user's traceback
            pass
        return previous(kind, value, tb)

    note_uncaught.__wrapped__ = previous  # type: ignore[attr-defined]
    return note_uncaught
