"""Where each worker's stream goes on when a ``StatefulDataLoader`` pool is resumed from its state.

torchdata resumes an IterableDataset's workers itself: a Stateful dataset (or dataset iterator)
loads its state at torchdata's last snapshot and torchdata replays the batches since; any other
stream it re-reads from its start, dropping the batches yielded already (a fast-forward in the
main process). The supervised workers therefore replay and load nothing (``StreamResume.base``);
they only need the position each worker's stream goes on from, so that an item keeps one
position along the whole chain of pools: a death's culprit is re-tried once at that position, and
a second death there ends that worker's stream just before it, said as a loss, as for torch's
DataLoader (``supervise.streams``).
"""

from __future__ import annotations

from typing import Any

from loaderdoctor import torchdata_compat
from loaderdoctor.supervise.parent.repair import follow_up
from loaderdoctor.supervise.streams import (
    NOT_REPLAYED,
    StreamBatch,
    StreamProgress,
    StreamResume,
)


class SnapshotPositions:
    """Each worker's stream position after the batches torchdata processed, and at its latest
    snapshot (the state a ``state_dict()`` now resumes from) within one epoch's progress."""

    def __init__(
        self, progress: StreamProgress | None = None, start: dict[int, int] | None = None
    ) -> None:
        self.progress = progress
        self.start = dict(start or {})  # where the pool's streams went on from
        self.ends: dict[int, int] = dict(self.start)
        self.at_snapshot: dict[int, int] = dict(self.start)

    def processed(self, data: Any, iterator: Any) -> None:
        """torchdata's ``iterator`` processed ``data`` (delivered, or replayed while resuming),
        and may have taken a snapshot after it."""
        progress = iterator._ld.parts.streams
        if progress is not self.progress:  # another epoch's progress: positions from 0
            self.progress, self.ends, self.at_snapshot = progress, {}, {}
        if isinstance(data, StreamBatch):
            self.ends[data.worker_id] = max(self.ends.get(data.worker_id, 0), data.end)
        if iterator.ld_snapshot_step == iterator.ld_num_yielded + 1:  # taken after this batch
            self.at_snapshot = dict(self.ends)


def plan_resumes(iterator: Any, state: Any) -> tuple[StreamProgress, dict[int, int]] | None:
    """Plan, in its progress, the workers' resumes of the pool that goes on from the stopped
    ``iterator``'s torchdata ``state``: (the progress, where each worker's stream goes on: its
    position at torchdata's snapshot, or 0 where torchdata re-reads every stream from its
    start); None for a map-style dataset."""
    progress: StreamProgress | None = iterator._ld.parts.streams
    if progress is None:
        return None
    positions: SnapshotPositions = iterator._ld_positions
    replay = torchdata_compat.fast_forwards(state)
    # a pool that died while torchdata resumed it goes on again from where it began
    unfinished = iterator._ld_resumed_from is not None
    bases = {} if replay else dict(positions.start if unfinished else positions.at_snapshot)
    planned = {}
    for worker_id in range(iterator._ld.parts.snapshot.num_workers):
        own = progress.resume_for(worker_id)  # the culprits not yet delivered, the stop
        base = bases.setdefault(worker_id, 0)
        stream = progress.workers.get(worker_id)
        # skips counted already: a re-read of the stream drops them again, uncounted
        reported = frozenset(p for p in stream.reported if p >= base) if stream else frozenset()
        planned[worker_id] = StreamResume(
            skip=0,
            culprits=own.culprits,
            reported=reported,
            replayable=own.replayable,
            stop=own.stop,
            base=base,
        )
    progress.planned = planned
    if replay and not progress.replayable and progress.incident is not None:
        line = (
            "the dataset says loaderdoctor_replayable=False, and torchdata resumes it by "
            "re-reading each worker's stream from its start: items may be duplicated or lost"
        )
        follow_up(iterator._ld.parts.sup, [(progress.incident, line, None, NOT_REPLAYED)])
    return progress, bases


__all__ = ["SnapshotPositions", "plan_resumes"]
