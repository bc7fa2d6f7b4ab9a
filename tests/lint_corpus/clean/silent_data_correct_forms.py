# expect:
# ruff: noqa
import itertools
import json
import multiprocessing

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info
from torch.utils.data.distributed import DistributedSampler


class JsonLines(IterableDataset):
    def __init__(self, paths):
        self.paths = paths

    def __iter__(self):
        info = get_worker_info()
        lines = (json.loads(line) for path in self.paths for line in open(path))
        if info is None:
            return lines
        return itertools.islice(lines, info.id, None, info.num_workers)


class Noise(IterableDataset):
    def __iter__(self):
        while True:
            yield torch.randn(3, 32, 32)  # each worker's generator is seeded apart


class Curriculum(Dataset):
    def __init__(self, images):
        self.images = images
        self.difficulty = multiprocessing.Value("i", 1)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.images[index] * self.difficulty.value


def train(model, images, paths, epochs):
    dataset = Curriculum(images)
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=4,
                        persistent_workers=True)
    streams = DataLoader(JsonLines(paths), batch_size=8, num_workers=4)
    noise = DataLoader(Noise(), batch_size=8, num_workers=2)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        dataset.difficulty.value = 1 + epoch // 10  # shared memory: the workers see it
        for batch in loader:
            model(batch)
        for batch, extra in zip(streams, noise):
            model(batch)


if __name__ == "__main__":
    train(torch.nn.Identity(), [torch.zeros(256)] * 64, ["a.jsonl"], 3)
