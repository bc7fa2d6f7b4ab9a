"""In a worker: fingerprints of the random states it starts with, for the main process to compare.

torch seeds each worker's ``torch``, ``random`` and (when imported) ``numpy`` global generators
apart (``base_seed + worker_id``). A generator the dataset holds (``self.rng =
np.random.default_rng(0)``, a ``random.Random``, a ``torch.Generator``) is not: fork copies it and
spawn's pickler copies its state, so every worker draws the same "random" crops and flips, with no
error. A ``worker_init_fn`` that seeds a global generator with a constant does the same. At the
worker's start, after the user's ``worker_init_fn`` (where a per-worker seed belongs), each such
state is hashed; the main process warns when two workers of a pool start from the same one.
Nothing is drawn: the worker's streams are untouched.
"""

from __future__ import annotations

import hashlib
import random
import sys
import types
from typing import Any

from loaderdoctor import boundary

EVENT_KIND = boundary.RNG_STATES_EVENT
DEPTH = 2  # dataset.rng, dataset.transform.rng
MAX_ATTRIBUTES = 64  # per object: a dataset with a huge __dict__ is not searched whole
_SCALARS = (str, bytes, int, float, bool, type(None))
# Not searched: values, and code (a transform object is searched: callable, but an instance)
_NOT_SEARCHED = (
    *_SCALARS,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
    type,
)
# Modules whose objects hold a generator that starts alike in every worker on purpose, and that
# the library sets apart per worker itself when the stream starts: not compared. Hugging Face
# datasets' IterableDataset shuffles its shards with one seed in every worker (so that the
# workers agree on who reads which shard) and then shifts each worker's example generators by
# its worker id (shift_ex_examples_rngs); re-seeding them per worker would break the first.
SET_APART_BY_THEIR_LIBRARY = frozenset({"datasets.iterable_dataset"})


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _state_bytes(state: Any) -> bytes:
    """A numpy state (a dict holding an array of 624 words) as bytes: the array's repr costs
    4 ms, its bytes 2 µs."""
    if isinstance(state, dict):
        return b"|".join(f"{key}=".encode() + _state_bytes(value) for key, value in state.items())
    tobytes = getattr(state, "tobytes", None)
    if callable(tobytes):
        return bytes(tobytes())
    return repr(state).encode()


def generator_state(value: Any) -> tuple[str, bytes] | None:
    """``(kind, state bytes)`` of a random generator object, None for anything else."""
    if isinstance(value, random.Random):
        return "random.Random", repr(value.getstate()).encode()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        if isinstance(value, numpy.random.Generator):
            return "numpy Generator", _state_bytes(value.bit_generator.state)
        if isinstance(value, numpy.random.RandomState):
            return "numpy RandomState", _state_bytes(value.get_state(legacy=False))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Generator):
        if value.device.type != "cpu":  # reading a CUDA generator would initialise CUDA here
            return None
        return "torch.Generator", bytes(value.get_state().numpy().tobytes())
    return None


def _attributes(value: Any) -> list[tuple[str, Any]]:
    try:
        items = vars(value)
    except TypeError:
        return []
    return list(items.items())[:MAX_ATTRIBUTES]


def dataset_generators(dataset: Any, depth: int = DEPTH) -> dict[str, tuple[str, str]]:
    """``{"self.rng": (kind, fingerprint)}`` for each generator in the dataset's attributes."""
    found: dict[str, tuple[str, str]] = {}
    level = [("self", dataset)]
    for _ in range(depth):
        below = []
        for path, owner in level:
            own = type(owner).__module__ not in SET_APART_BY_THEIR_LIBRARY
            for name, value in _attributes(owner):
                where = f"{path}.{name}"
                state = generator_state(value)
                if state is not None:
                    if own:
                        found[where] = (state[0], _digest(state[1]))
                elif not isinstance(value, _NOT_SEARCHED):
                    below.append((where, value))
        level = below
    return found


def global_states() -> dict[str, tuple[str, str]]:
    """The process-wide generators torch seeds per worker: ``torch``, ``random``, ``numpy``."""
    found = {"random": ("the random module", _digest(repr(random.getstate()).encode()))}
    torch = sys.modules.get("torch")
    if torch is not None:
        state = torch.random.get_rng_state().numpy().tobytes()
        found["torch"] = ("torch's global generator", _digest(bytes(state)))
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # imported by the user's code: torch seeded it
        state = numpy.random.get_state(legacy=False)
        found["numpy"] = ("numpy's global generator", _digest(_state_bytes(state)))
    return found


def event(dataset: Any) -> dict[str, Any]:
    """The event a worker sends the main process: its random states' fingerprints."""
    try:
        states = {**global_states(), **dataset_generators(dataset)}
    except Exception:  # a generator whose state cannot be read: nothing to compare
        states = {}
    return {
        "kind": EVENT_KIND,
        "dataset": type(dataset).__name__,
        "states": {name: list(kind_and_print) for name, kind_and_print in states.items()},
    }


__all__ = ["EVENT_KIND", "dataset_generators", "event", "generator_state", "global_states"]
