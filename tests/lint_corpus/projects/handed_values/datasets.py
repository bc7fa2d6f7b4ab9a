from collections import defaultdict

import cv2
import numpy as np
from torch.utils.data import DataLoader, Dataset

import augment
from augment import *


class Frames(Dataset):
    def __init__(self, paths, transform=None):
        self.paths = paths
        self.transform = transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        image = cv2.imdecode(np.fromfile(self.paths[index], dtype=np.uint8), cv2.IMREAD_COLOR)
        return self.transform(image) if self.transform else image


class Pipeline(Dataset):
    def __init__(self, paths, names):
        self.paths = paths
        self.steps = [getattr(augment, name)(64) for name in names]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        image = np.load(self.paths[index])
        for step in self.steps:
            image = step(image)
        return image


class Triples(Dataset):
    def __init__(self, heads, tails, count):
        self.heads = heads
        self.tails = tails
        self.count = count

    def __len__(self):
        return len(self.heads)

    def __getitem__(self, index):
        head, tail = self.heads[index], self.tails[index]
        return head, tail, self.count[(head, tail)]


class ListLoader(DataLoader):
    def __init__(self, dataset, batch_size):
        super().__init__(
            dataset, batch_size=batch_size, num_workers=4, collate_fn=lambda batch: list(batch)
        )


class Augmented(Dataset):
    def __init__(self, paths, transforms):
        self.paths = paths
        self.transforms = transforms

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        image = np.load(self.paths[index])
        for transform in self.transforms:
            image = transform(image)
        return image
