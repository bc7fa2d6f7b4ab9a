"""The quarantine file: indices that must never be fetched again, with the cause and evidence.

Written by the healing DataLoader as incidents happen (and by ``loaderdoctor scan``), read at the
start of every epoch. One JSON document, replaced atomically so a crash never leaves half a file:

    {"schema": 1, "quarantine": [{"index": 37, "cause": "native-crash", "file": "...",
                                  "evidence": ["..."], "when": "2026-11-29T21:40:00+00:00"}]}
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

SCHEMA = 1


class QuarantineFileError(ValueError):
    """The quarantine file exists but cannot be used; the message says what to do."""


@dataclass
class QuarantineEntry:
    index: int
    cause: str
    evidence: list[str] = field(default_factory=list)
    file: str | None = None
    when: str = ""


def read_quarantine(path: str | os.PathLike[str]) -> dict[int, QuarantineEntry]:
    """The entries of ``path`` by index; an absent file is an empty quarantine."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise QuarantineFileError(
            f"cannot read quarantine file {os.fspath(path)!r}: {error}; fix or delete it"
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get("quarantine"), list):
        raise QuarantineFileError(
            f"{os.fspath(path)!r} is not a loaderdoctor quarantine file "
            '(expected {"schema": 1, "quarantine": [...]}); fix or delete it'
        )
    entries: dict[int, QuarantineEntry] = {}
    for item in document["quarantine"]:
        if isinstance(item, int):  # a bare list of indices is accepted too
            item = {"index": item, "cause": "unknown"}
        if not isinstance(item, dict) or not isinstance(item.get("index"), int):
            raise QuarantineFileError(
                f"{os.fspath(path)!r}: every entry needs an integer 'index', got {item!r}"
            )
        known = {k: v for k, v in item.items() if k in QuarantineEntry.__dataclass_fields__}
        known.setdefault("cause", "unknown")
        entries[item["index"]] = QuarantineEntry(**known)
    return entries


def write_quarantine(path: str | os.PathLike[str], entries: dict[int, QuarantineEntry]) -> None:
    """Replace ``path`` atomically with ``entries`` (sorted by index)."""
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "quarantine": [asdict(entries[index]) for index in sorted(entries)],
    }
    write_json_atomically(path, document, indent=2)


def write_json_atomically(
    path: str | os.PathLike[str], document: Any, indent: int | None = None
) -> None:
    """Write to a temporary file beside ``path``, then rename it over ``path``: all or nothing."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=".loaderdoctor-", dir=directory)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=indent)
            handle.write("\n")
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
