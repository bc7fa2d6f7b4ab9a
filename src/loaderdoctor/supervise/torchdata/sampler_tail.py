"""The sampler of a pool resumed from a loader's own state (torchdata's ``StatefulDataLoader``).

torchdata restores its own stateful samplers exactly, and fast-forwards any other over a new pass
(for a random one, another order). Healing needs the same pass: the resumed pool draws the index
batches the stopped pool drew after the state's snapshot, then the rest of its sampler iterator.
"""

from __future__ import annotations

import itertools
from typing import Any

from loaderdoctor.supervise.worker.loader_view import has_own_state


class SamplerTail:
    """A stopped pool's sampler, for a pool resumed from its state: the index batches it drew
    after the state's snapshot, then the rest of its own sampler iterator (the same pass)."""

    def __init__(self, drawn: list[tuple[int, Any]], rest: Any) -> None:
        self.drawn, self.rest = drawn, rest

    def after(self, yielded: int, restored: Any) -> Any:
        """The resumed pool's sampler iterator: the same pass from draw ``yielded`` on, keeping
        torchdata's ``restored`` iterator in step for the state a later ``state_dict()`` saves."""
        pending = itertools.chain([index for n, index in self.drawn if n > yielded], self.rest)
        kind = _StatefulInStep if has_own_state(restored) else InStep
        return kind(pending, restored)


class InStep:
    """Draws from ``pending``; advances ``restored`` (torchdata's own resumed sampler iterator,
    a new pass that only fast-forwards to the same count) in step, so that its state, which a
    ``state_dict()`` saves, counts what was drawn."""

    def __init__(self, pending: Any, restored: Any) -> None:
        self.pending, self.restored = pending, restored

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        index = next(self.pending)
        try:
            next(self.restored)
        except StopIteration:  # the same pass: both end together, or the restored one first
            pass
        return index


class _StatefulInStep(InStep):
    def state_dict(self) -> Any:
        return self.restored.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.restored.load_state_dict(state)


__all__ = ["InStep", "SamplerTail"]
