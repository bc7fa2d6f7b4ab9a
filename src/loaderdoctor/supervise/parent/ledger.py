"""The ledger of one worker pool: every batch handed to a worker is owed until it is delivered.

When a pool is rebuilt, every owed batch is sent again, in order, before the sampler continues;
when one worker is replaced, the batches that worker owed are sent again to its replacement. So
each healthy sample arrives exactly once: nothing delivered is sent twice, nothing owed is lost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container
from dataclasses import dataclass
from typing import Any


class Ledger:
    def __init__(self) -> None:
        self._owed: dict[int, Any] = {}  # task number -> the indices of that batch

    def owe(self, task: int, indices: Any) -> None:
        self._owed[task] = indices

    def settle_handed_over(self, outstanding: Container[int]) -> tuple[int | None, Any]:
        """The batch torch just took off its books (no longer in ``outstanding``): (task,
        indices).

        torch pops a task from ``_task_info`` just before it processes the data; the owed task
        that is not outstanding any more is the one being handed over.
        """
        task: int | None = None
        indices: Any = None
        for owed_task in [t for t in self._owed if t not in outstanding]:
            task, indices = owed_task, self._owed.pop(owed_task)
        return task, indices

    def owes(self, task: int) -> bool:
        return task in self._owed

    def indices_of(self, task: int) -> Any:
        return self._owed.get(task)

    def owed_in_order(self) -> list[Any]:
        return [self._owed[task] for task in sorted(self._owed)]

    def clear(self) -> None:
        self._owed.clear()

    def __len__(self) -> int:
        return len(self._owed)


@dataclass
class Counts:
    """What one loader counted across its iterators: the report's ``counts`` (same keys, same
    order, as ``as_dict``)."""

    batches: int = 0  # delivered to the user
    samples: int = 0  # in the delivered batches
    skipped: int = 0  # left out (quarantined, or skipped by the sample policy)
    replaced: int = 0  # replaced by a substitute (on_error="replace")
    resent_batches: int = 0  # owed by a dead worker or a stopped pool, sent again
    probe_failures: int = 0  # a sample re-tried alone whose probe could not tell

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


__all__ = ["Counts", "Ledger"]
