# expect:
# ruff: noqa
"""Stream shards of a dataset; each worker reads its own shards."""

import glob
import math
import random

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class ShardStream(IterableDataset):
    def __init__(self, pattern, shuffle=True):
        self.shards = sorted(glob.glob(pattern))
        self.shuffle = shuffle

    def _my_shards(self):
        info = get_worker_info()
        if info is None:
            return self.shards
        per_worker = math.ceil(len(self.shards) / info.num_workers)
        return self.shards[info.id * per_worker : (info.id + 1) * per_worker]

    def __iter__(self):
        shards = list(self._my_shards())
        if self.shuffle:
            random.shuffle(shards)
        for shard in shards:
            with open(shard) as handle:
                for line in handle:
                    yield torch.tensor([float(x) for x in line.split(",")])


def run(pattern="shards/*.csv", workers=4):
    loader = DataLoader(ShardStream(pattern), batch_size=128, num_workers=workers)
    total = 0
    for batch in loader:
        total += batch.shape[0]
    return total


if __name__ == "__main__":
    print(run())
