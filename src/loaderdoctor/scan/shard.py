"""Scale a scan out with torchrun: each rank scans every WORLD_SIZE-th index, rank 0 merges.

``torchrun --nproc_per_node=N -m loaderdoctor scan SPEC`` on one machine or several: the ranks meet
in a gloo process group (no GPU needed), scan disjoint shards in their own supervised workers and
send their state to rank 0, which writes the one report and the one quarantine file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

from loaderdoctor.scan.state import ScanState

# Meeting the other ranks takes seconds; a rendezvous that cannot happen (a wrong MASTER_PORT)
# must fail, not retry for a day.
JOIN_TIMEOUT = timedelta(minutes=5)
# A shard of a large dataset can take hours, and the first rank done waits for the last; a rank
# that dies makes torchrun stop the others, so this long timeout cannot become a hang.
GATHER_TIMEOUT = timedelta(hours=24)


@dataclass(frozen=True)
class Shard:
    rank: int
    world_size: int

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    def indices(self, total: int) -> range:
        return range(self.rank, total, self.world_size)


def current_shard() -> Shard:
    """This process's shard under torchrun (RANK and WORLD_SIZE set), else the whole dataset."""
    try:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
    except ValueError:
        return Shard(0, 1)
    if world_size <= 1 or not 0 <= rank < world_size:
        return Shard(0, 1)
    return Shard(rank, world_size)


class JoinError(Exception):
    """The ranks could not meet: one line saying what torchrun's environment lacks."""


def join(shard: Shard) -> bool:
    """Join the gloo group torchrun set up (MASTER_ADDR, MASTER_PORT); True if this call did."""
    import torch.distributed as dist

    if shard.world_size == 1 or dist.is_initialized():
        return False
    if os.environ.get("MASTER_PORT", "") in ("", "0"):
        raise JoinError(
            f"rank {shard.rank} of {shard.world_size}: MASTER_PORT is "
            f"{os.environ.get('MASTER_PORT', 'not set')!r}; run under torchrun --standalone, "
            "or give --master-port a free port"
        )
    try:
        dist.init_process_group("gloo", timeout=JOIN_TIMEOUT)
    except (RuntimeError, ValueError) as error:  # DistStoreError is a RuntimeError
        raise JoinError(f"rank {shard.rank} could not meet the other ranks: {error}") from None
    return True


def gather(state: ScanState, shard: Shard, seconds: float) -> tuple[ScanState, float]:
    """Every rank's state merged on rank 0 (the others get their own back) and the longest time."""
    if shard.world_size == 1:
        return state, seconds
    import torch.distributed as dist

    parts: list[tuple[dict[str, object], float] | None] = [None] * shard.world_size
    patient = dist.new_group(backend="gloo", timeout=GATHER_TIMEOUT)
    # torch 2.14 types new_group's result as a group or NON_GROUP_MEMBER (-100); every rank is a
    # member of a group of all ranks
    assert isinstance(patient, dist.ProcessGroup)
    dist.all_gather_object(parts, (state.to_dict(), seconds), group=patient)
    if not shard.is_leader:
        return state, seconds
    merged = ScanState(state.spec, state.total)
    for part in parts:
        assert part is not None
        merged.merge(ScanState.from_dict(part[0]))
    return merged, max(part[1] for part in parts if part is not None)


def leave(joined: bool) -> None:
    if joined:
        import torch.distributed as dist

        dist.destroy_process_group()
