"""Where this process's flight-recorder tables are, for ``loaderdoctor top`` to read from outside.

A daemon thread of each process that built a supervised loader rewrites
``DIR/.incidents/<pid>.live.json`` (``protocol.live_path``) when what it says changes: each live
table (``recorder.LIVE_RECORDERS``) with where another process opens it, and each loader with the
place that built it and its worker pids, which tell ``top`` whose table is whose. A thread, not a
hook on the loader's records: a pool whose first batch never comes changes no record. Nothing of
the loaders is touched; the file goes at exit (and with ``.incidents`` when ``run`` ends).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import weakref
from collections.abc import Iterable
from typing import Any, TypeVar

from loaderdoctor.recorder import LIVE_RECORDERS, FlightRecorder, TableLocation
from loaderdoctor.runner import protocol

REFRESH_S = 0.5
_T = TypeVar("_T")


class LiveIndex:
    """The index of one process: ``loaders`` is told of each supervised loader as it is built."""

    def __init__(self, directory: str, rank: int | None) -> None:
        self.directory = directory
        self.rank = rank
        self.pid = os.getpid()
        self.loaders: list[tuple[str, weakref.ref[Any]]] = []  # (site, its Supervision)
        self._locations: weakref.WeakKeyDictionary[FlightRecorder, TableLocation | None] = (
            weakref.WeakKeyDictionary()
        )
        self._written = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, site: str, supervision: Any) -> None:
        self.loaders.append((site, weakref.ref(supervision)))
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="loaderdoctor-live-index", daemon=True
            )
            self._thread.start()
            atexit.register(self.remove)

    def document(self) -> dict[str, Any]:
        tables = []
        for recorder in _copy(LIVE_RECORDERS):
            if recorder not in self._locations:
                self._locations[recorder] = recorder.location()
            location = self._locations[recorder]
            if location is not None:
                tables.append(location.to_dict())
        loaders = []
        for number, (site, reference) in enumerate(self.loaders):
            supervision = reference()
            if supervision is None:
                continue
            loaders.append(
                {
                    "number": number,
                    "site": site,
                    "num_workers": supervision.base_settings[0],
                    "hang_timeout": supervision.settings.hang_timeout,
                    "worker_pids": sorted(_copy(supervision.worker_pids)),
                }
            )
        return {
            "schema": protocol.LIVE_SCHEMA,
            "pid": self.pid,
            "rank": self.rank,
            "loaders": loaders,
            "tables": sorted(tables, key=lambda t: (t["fd"] or 0, t["inode"])),
        }

    def refresh(self) -> None:
        document = self.document()
        text = json.dumps(document, sort_keys=True)
        if text == self._written:
            return
        with contextlib.suppress(OSError):
            protocol.write_json(protocol.live_path(self.directory, self.pid), document)
            self._written = text

    def remove(self) -> None:
        self._stop.set()
        if os.getpid() == self.pid:  # a forked child runs the parent's atexit too
            with contextlib.suppress(OSError):
                os.unlink(protocol.live_path(self.directory, self.pid))

    def _run(self) -> None:
        while not self._stop.wait(REFRESH_S):
            if os.getpid() != self.pid:
                return
            try:
                self.refresh()
            except Exception:  # never in the way of the training: the next turn tries again
                continue


def _copy(items: Iterable[_T]) -> list[_T]:
    """The set, copied while another thread may add to it."""
    for _ in range(3):
        try:
            return list(items)
        except RuntimeError:  # changed size during the copy
            continue
    return []
