"""The skip/replace events workers write (one JSON line each), read back by the main process."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from loaderdoctor.supervise import files


class EventReader:
    """Reads each worker's event file from where it stopped last time; a partial line waits."""

    def __init__(self, log_dir: str, take: Callable[[dict[str, Any]], None]) -> None:
        self.log_dir = log_dir
        self.take = take
        self._offsets: dict[str, int] = {}
        self._seen = 0

    def drain_if_new(self, total: int) -> None:
        """``total`` is the recorder's event counter: read only when it moved."""
        if total != self._seen:
            self._seen = total
            self.drain()

    def drain(self) -> None:
        try:
            names = files.names_of(self.log_dir, files.EVENTS_PREFIX)
        except OSError:
            return
        for name in names:
            path = os.path.join(self.log_dir, name)
            offset = self._offsets.get(name, 0)
            try:
                with open(path, encoding="utf-8") as handle:
                    handle.seek(offset)
                    text = handle.read()
            except OSError:
                continue
            complete = text[: text.rfind("\n") + 1]
            self._offsets[name] = offset + len(complete.encode("utf-8"))
            for line in complete.splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                self.take(event)


__all__ = ["EventReader"]
