# expect: LD109 LD109 LD109
# ruff: noqa
import random

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset


class Jitter(Dataset):
    def __init__(self, values, seed=0):
        self.values = values
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return len(self.values)

    def __getitem__(self, index):
        return self.values[index] + self.rng.normal()


class Crops(Dataset):
    def __init__(self, images):
        self.images = images
        self.generator = torch.Generator().manual_seed(42)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        offset = torch.randint(0, 4, (1,), generator=self.generator)
        return self.images[index][offset:]


class Stream(IterableDataset):
    def __init__(self):
        self.random = random.Random(1234)

    def __iter__(self):
        while True:
            yield self.random.random()
