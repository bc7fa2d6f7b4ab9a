"""The quarantine file: indices that must never be fetched again, with the cause and evidence.

Written by the healing DataLoader as incidents happen (and by ``loaderdoctor scan``), read at the
start of every epoch. One JSON document, replaced atomically so a crash never leaves half a file:

    {"schema": 1, "quarantine": [{"index": 37, "cause": "native-crash", "file": "...",
                                  "evidence": ["..."], "when": "2026-11-29T21:40:00+00:00"}]}
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from loaderdoctor import inputfile
from loaderdoctor.atomic import write_json_atomically
from loaderdoctor.units import shortened

SCHEMA = 1


class QuarantineFileError(ValueError):
    """The quarantine file exists but cannot be used; the message says what to do."""


class QuarantineWarning(UserWarning):
    """A quarantine file that is usable but looks like another dataset's."""


class InvalidIndex(ValueError):
    """A value that cannot be a sample index; the message says why, without naming the file."""


# Samplers hand indices around as int64 (torch.randperm, tensors of indices): a larger number
# cannot name a sample of any dataset, and would fail far from the file that held it.
MAX_INDEX = 2**63 - 1


def sample_index(value: object, length: int | None = None) -> int:
    """``value`` as a sample index, or :class:`InvalidIndex` saying why it cannot be one.

    The one check behind every file that names samples (quarantine files, scan checkpoints):
    JSON ``true`` is not index 1, ``-1`` is not the last sample (``dataset[-1]`` would fetch
    it, but no sampler yields it), and ``1e20`` or ``10**20`` names no sample of any dataset.
    With ``length``, an index past the end of the dataset is refused too.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidIndex(f"{json_text(value)} is not an integer index")
    if value < 0:
        raise InvalidIndex(f"{value} is negative; indices count from 0")
    if value > MAX_INDEX:
        raise InvalidIndex(f"{value} is beyond any dataset (indices stop at 2**63 - 1)")
    if length is not None and value >= length:
        raise InvalidIndex(f"{value} is past the end of a dataset of {length} samples")
    return value


@dataclass
class QuarantineEntry:
    index: int
    cause: str
    evidence: list[str] = field(default_factory=list)
    file: str | None = None
    when: str = ""
    # the loader whose incident quarantined it (``call_site``: where built, and its name)
    loader: str | None = None


_ENTRY_TYPES: dict[str, tuple[type, ...]] = {
    "cause": (str,),
    "file": (str, type(None)),
    "when": (str,),
    "loader": (str, type(None)),
}


def read_quarantine(
    path: str | os.PathLike[str], dataset_length: int | None = None
) -> dict[int, QuarantineEntry]:
    """The entries of ``path`` by index; an absent file is an empty quarantine.

    An entry that cannot be one (not an index, a field of the wrong type) or a schema this
    loaderdoctor does not know is a :class:`QuarantineFileError` naming it. Indices past
    ``dataset_length`` are kept (they skip nothing) but warned about once per file: the file
    may belong to another dataset.
    """
    name = os.fspath(path)
    try:
        # never blocks on a FIFO, nor raises RecursionError on JSON nested too deep
        document = inputfile.load_json(path)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise QuarantineFileError(
            f"cannot read quarantine file {name!r}: {error}; fix or delete it"
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get("quarantine"), list):
        raise QuarantineFileError(
            f"{name!r} is not a loaderdoctor quarantine file "
            '(expected {"schema": 1, "quarantine": [...]}); fix or delete it'
        )
    schema = document.get("schema", SCHEMA)  # a hand-written file may leave it out
    if isinstance(schema, bool) or schema != SCHEMA:
        raise QuarantineFileError(
            f"{name!r}: quarantine file schema {schema!r}; this loaderdoctor reads {SCHEMA}"
        )
    entries: dict[int, QuarantineEntry] = {}
    for position, item in enumerate(document["quarantine"]):
        entry = _entry(item, f"{name!r}: quarantine entry {position} ({json_text(item)})")
        entries[entry.index] = entry
    if dataset_length is not None:
        _warn_past_the_end(name, sorted(i for i in entries if i >= dataset_length), dataset_length)
    return entries


def dataset_length(dataset: object) -> int | None:
    """``len(dataset)``, or None for a stream (an ``IterableDataset`` need not have one)."""
    try:
        return len(dataset)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        return None


def _entry(item: object, where: str) -> QuarantineEntry:
    if not isinstance(item, dict):  # a bare index is accepted too
        item = {"index": item, "cause": "unknown"}
    if "index" not in item:
        raise QuarantineFileError(f"{where}: no 'index'; fix or delete the entry")
    try:
        index = sample_index(item["index"])
    except InvalidIndex as error:
        raise QuarantineFileError(f"{where}: {error}; fix or delete the entry") from None
    values: dict[str, Any] = {"index": index, "cause": "unknown"}
    for key, value in item.items():
        if key == "evidence":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise QuarantineFileError(f"{where}: 'evidence' must be a list of strings")
        elif key in _ENTRY_TYPES:
            if not isinstance(value, _ENTRY_TYPES[key]):
                raise QuarantineFileError(
                    f"{where}: {key!r} must be a {_ENTRY_TYPES[key][0].__name__}, "
                    f"got {json_text(value)}"
                )
        else:
            continue  # the index, or a field of a later loaderdoctor: ignored, never fatal
        values[key] = value
    return QuarantineEntry(**values)


def json_text(value: object, limit: int = 60) -> str:
    """``value`` as the JSON text a user wrote (``true``, not ``True``), cut to ``limit``."""
    return shortened(json.dumps(value, default=repr), limit)


_warned_past_the_end: set[str] = set()


def _warn_past_the_end(name: str, past: list[int], length: int) -> None:
    if not past or name in _warned_past_the_end:
        return
    _warned_past_the_end.add(name)
    shown = ", ".join(map(str, past[:3])) + (", ..." if len(past) > 3 else "")
    warnings.warn(
        f"quarantine file {name!r} names {len(past)} "
        f"{'index' if len(past) == 1 else 'indices'} past the end of this dataset of {length} "
        f"samples ({shown}): the file may belong to another dataset",
        QuarantineWarning,
        stacklevel=3,
    )


def write_quarantine(path: str | os.PathLike[str], entries: dict[int, QuarantineEntry]) -> None:
    """Replace ``path`` atomically with ``entries`` (sorted by index)."""
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "quarantine": [asdict(entries[index]) for index in sorted(entries)],
    }
    write_json_atomically(path, document, indent=2)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
