"""What a scan knows so far, per index; saved as a checkpoint so an interrupted scan can resume.

The state is keyed by the dataset's own indices, so states merge: torchrun ranks that scanned
disjoint shards, or a checkpoint and the samples scanned after resuming from it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from loaderdoctor.scan.model import BadSample

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

    def done(self, index: int) -> bool:
        return index in self.loaded or index in self.bad

    def __len__(self) -> int:
        return len(self.loaded) + len(self.bad)

    def merge(self, other: ScanState) -> None:
        """Take every result of ``other``; a sample that loaded anywhere is not bad."""
        self.loaded.update(other.loaded)
        for index, bad in other.bad.items():
            if index not in self.loaded:
                self.bad.setdefault(index, bad)
        for index in self.loaded.keys() & self.bad.keys():
            del self.bad[index]

    def to_json(self) -> dict[str, Any]:
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
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScanState:
        if data.get("schema") != CHECKPOINT_SCHEMA:
            raise CheckpointError(f"unsupported checkpoint schema {data.get('schema')!r}")
        structures = data["structures"]
        return cls(
            spec=data["spec"],
            total=data["total"],
            loaded={
                int(index): Loaded(float(seconds), structures[which], int(peak))
                for index, seconds, which, peak in data["loaded"]
            },
            bad={int(item["index"]): BadSample(**item) for item in data["bad"]},
        )


def save_checkpoint(path: str | os.PathLike[str], state: ScanState) -> None:
    from loaderdoctor.supervise.quarantine import write_json_atomically

    write_json_atomically(path, state.to_json())


def load_checkpoint(path: str | os.PathLike[str], spec: str, total: int) -> ScanState:
    """The checkpoint at ``path``; one clear error when it is unreadable or for another dataset."""
    try:
        with open(path, encoding="utf-8") as handle:
            state = ScanState.from_json(json.load(handle))
    except OSError as error:
        raise CheckpointError(f"cannot read checkpoint {path}: {error.strerror}") from None
    except (ValueError, KeyError, TypeError, IndexError) as error:
        raise CheckpointError(f"checkpoint {path} is damaged ({type(error).__name__})") from None
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
