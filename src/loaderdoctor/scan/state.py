"""What a scan knows so far, per index; saved as a checkpoint so an interrupted scan can resume.

The state is keyed by the dataset's own indices, so states merge: torchrun ranks that scanned
disjoint shards, or a checkpoint and the samples scanned after resuming from it.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from loaderdoctor.atomic import write_json_atomically
from loaderdoctor.inputfile import InputFileError, load_json
from loaderdoctor.jsonshape import ShapeError, check_shape, json_kind
from loaderdoctor.scan.model import BadSample, ShardRun
from loaderdoctor.supervise.parent.quarantine import InvalidIndex, json_text, sample_index

CHECKPOINT_SCHEMA = 1


class CheckpointError(Exception):
    """A checkpoint that cannot be read, or that belongs to another scan."""


@dataclass
class Loaded:
    """A sample that loaded: how long it took, its structure, how far it raised peak memory."""

    seconds: float
    structure: str
    peak_bytes: int


@dataclass
class ScanState:
    spec: str
    total: int
    loaded: dict[int, Loaded] = field(default_factory=dict)
    bad: dict[int, BadSample] = field(default_factory=dict)
    # What each worker's first fetch took beyond the sample's own time: its start-up.
    startup: list[float] = field(default_factory=list)
    # Samples in flight at a worker death that were not quarantined (they loaded alone): the
    # report lists those of them that loaded as flaky.
    deaths: dict[int, BadSample] = field(default_factory=dict)
    # On a Ray cluster: each finished shard and the node that scanned it.
    shards: list[ShardRun] = field(default_factory=list)

    def done(self, index: int) -> bool:
        return index in self.loaded or index in self.bad

    def __len__(self) -> int:
        return len(self.loaded) + len(self.bad)

    def merge(self, other: ScanState) -> None:
        """Take every result of ``other``; a sample that loaded anywhere is not bad."""
        self.loaded.update(other.loaded)
        self.startup.extend(other.startup)
        self.shards.extend(other.shards)
        for index, death in other.deaths.items():
            self.deaths.setdefault(index, death)
        for index, bad in other.bad.items():
            if index not in self.loaded:
                self.bad.setdefault(index, bad)
        for index in self.loaded.keys() & self.bad.keys():
            del self.bad[index]

    def to_dict(self) -> dict[str, Any]:
        # Structures repeat across samples: store each once and refer to it by position.
        structures: dict[str, int] = {}
        rows = [
            [
                index,
                round(item.seconds, 6),
                structures.setdefault(item.structure, len(structures)),
                item.peak_bytes,
            ]
            for index, item in sorted(self.loaded.items())
        ]
        return {
            "schema": CHECKPOINT_SCHEMA,
            "spec": self.spec,
            "total": self.total,
            "structures": list(structures),
            "loaded": rows,
            "bad": [asdict(self.bad[index]) for index in sorted(self.bad)],
            "startup": [round(seconds, 6) for seconds in self.startup],
            "deaths": [asdict(self.deaths[index]) for index in sorted(self.deaths)],
            "shards": [asdict(shard) for shard in self.shards],
        }

    @classmethod
    def from_dict(cls, data: object) -> ScanState:
        """A state from a checkpoint's JSON; :class:`CheckpointError` names what makes no sense.

        Indices go through the quarantine file's own check (``sample_index``), and past
        ``total`` they are refused: a checkpoint's results become quarantine entries.
        """
        if not isinstance(data, dict):
            raise CheckpointError(f"not a scan checkpoint ({json_kind(data)}, not an object)")
        schema = data.get("schema")
        if isinstance(schema, bool) or schema != CHECKPOINT_SCHEMA:
            raise CheckpointError(
                f"checkpoint schema {json_text(schema)}; this loaderdoctor reads "
                f"{CHECKPOINT_SCHEMA}"
            )
        spec = _field(data, "spec", str)
        total = _field(data, "total", int)
        if isinstance(total, bool) or total < 0:
            raise CheckpointError(f"a 'total' of {json_text(total)} samples")
        structures = _field(data, "structures", list)
        if not all(isinstance(item, str) for item in structures):
            raise CheckpointError("'structures' is not a list of text")
        state = cls(spec=spec, total=total)
        for position, row in enumerate(_field(data, "loaded", list)):
            index, loaded = _loaded(row, structures, total, f"'loaded' entry {position}")
            state.loaded[index] = loaded
        for position, item in enumerate(_field(data, "bad", list)):
            bad = _bad(item, total, f"'bad' entry {position}")
            state.bad[bad.index] = bad
        startup = data.get("startup", [])  # absent before loaderdoctor 0.1's start-up split
        if not isinstance(startup, list) or not all(_seconds(s) for s in startup):
            raise CheckpointError("'startup' is not a list of seconds")
        state.startup = [float(seconds) for seconds in startup]
        deaths = data.get("deaths", [])  # absent before flaky samples were reported
        if not isinstance(deaths, list):
            raise CheckpointError("'deaths' is not a list")
        for position, item in enumerate(deaths):
            death = _bad(item, total, f"'deaths' entry {position}")
            state.deaths[death.index] = death
        state.shards = _shards(data.get("shards", []))  # absent where no Ray cluster scanned
        return state


def _shards(items: object) -> list[ShardRun]:
    try:
        check_shape(items, list[ShardRun], "'shards'")
    except ShapeError as error:
        raise CheckpointError(str(error)) from None
    assert isinstance(items, list)
    return [ShardRun(**item) for item in items]


def _seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def _describe_kind(kind: type) -> str:
    return {dict: "an object", list: "a list", str: "text", int: "an integer"}[kind]


def _field(data: dict[str, Any], key: str, kind: type) -> Any:
    if key not in data:
        raise CheckpointError(f"no {key!r}")
    value = data[key]
    if not isinstance(value, kind):
        raise CheckpointError(f"{key!r} is {json_text(value)}, not {_describe_kind(kind)}")
    return value


def _index(value: object, total: int, where: str) -> int:
    try:
        return sample_index(value, total)
    except InvalidIndex as error:
        raise CheckpointError(f"{where}: {error}") from None


def _loaded(row: object, structures: list[str], total: int, where: str) -> tuple[int, Loaded]:
    """``[index, seconds, structure position, peak bytes]``."""
    if not isinstance(row, list) or len(row) != 4:
        raise CheckpointError(f"{where} ({json_text(row)}): expected [index, s, structure, bytes]")
    index, seconds, which, peak = row
    index = _index(index, total, f"{where} ({json_text(row)})")
    numbers = (seconds, which, peak)
    if any(isinstance(n, bool) or not isinstance(n, int | float) or n < 0 for n in numbers):
        raise CheckpointError(f"{where} ({json_text(row)}): negative or non-numeric values")
    if not isinstance(which, int) or which >= len(structures):
        raise CheckpointError(f"{where} ({json_text(row)}): no structure {json_text(which)}")
    if not isinstance(peak, int):
        raise CheckpointError(f"{where} ({json_text(row)}): peak bytes must be an integer")
    return index, Loaded(float(seconds), structures[which], peak)


def _bad(item: object, total: int, where: str) -> BadSample:
    if not isinstance(item, dict):
        raise CheckpointError(f"{where}: expected an object with index, cause and message")
    index = _index(item.get("index"), total, where)
    cause, file, message = item.get("cause"), item.get("file"), item.get("message")
    evidence = item.get("evidence", [])
    if not isinstance(cause, str) or not isinstance(message, str):
        raise CheckpointError(f"{where}: 'cause' and 'message' must be text")
    if file is not None and not isinstance(file, str):
        raise CheckpointError(f"{where}: 'file' must be text or null")
    if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
        raise CheckpointError(f"{where}: 'evidence' must be a list of text")
    return BadSample(index, cause, file, message, evidence)


def save_checkpoint(path: str | os.PathLike[str], state: ScanState) -> None:
    write_json_atomically(path, state.to_dict())


def load_checkpoint(path: str | os.PathLike[str], spec: str, total: int) -> ScanState:
    """The checkpoint at ``path``; one clear error when it is unreadable or for another dataset."""
    try:
        data = load_json(path)
    except InputFileError as error:
        raise CheckpointError(f"checkpoint {path}: {error}; delete it to start over") from None
    except OSError as error:
        raise CheckpointError(f"cannot read checkpoint {path}: {error.strerror}") from None
    except ValueError as error:
        raise CheckpointError(f"checkpoint {path} is damaged (not JSON: {error})") from None
    try:
        state = ScanState.from_dict(data)
    except CheckpointError as error:
        raise CheckpointError(f"checkpoint {path}: {error}; delete it to start over") from None
    if state.total != total:
        raise CheckpointError(
            f"checkpoint {path} is of a dataset with {state.total} samples, this one has "
            f"{total}: delete it to start over"
        )
    if state.spec and spec and state.spec != spec:
        raise CheckpointError(
            f"checkpoint {path} is of {state.spec}, not {spec}: delete it to start over"
        )
    return state
