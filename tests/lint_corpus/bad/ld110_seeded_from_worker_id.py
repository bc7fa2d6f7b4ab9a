# expect: LD110
# ruff: noqa
# Optical-flow training seeds each worker on its first item from its id alone. The workers are
# not persistent, so every epoch starts fresh copies of the Dataset (init_seed False again) and
# replays the same crops, flips and colour jitter.
import random

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class FlowPairs(Dataset):
    def __init__(self, pairs, crop=368):
        self.pairs = pairs
        self.crop = crop
        self.init_seed = False

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, index):
        if not self.init_seed:
            worker_info = torch.utils.data.get_worker_info()
            if worker_info is not None:
                torch.manual_seed(worker_info.id)
                np.random.seed(worker_info.id)
                random.seed(worker_info.id)
                self.init_seed = True
        first, second = np.load(self.pairs[index][0]), np.load(self.pairs[index][1])
        top = np.random.randint(0, first.shape[0] - self.crop)
        return first[top : top + self.crop], second[top : top + self.crop]


def main(pairs):
    loader = DataLoader(FlowPairs(pairs), batch_size=8, shuffle=True, num_workers=4)
    for _ in range(100):
        for first, second in loader:
            first.sum()


if __name__ == "__main__":
    main([])
