# expect: LD102 LD102 LD102 LD102
# ruff: noqa
import functools

import torch
from torch.utils.data import DataLoader, Dataset, Sampler


class Numbers(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, index):
        return index


def build(scale):
    def collate(batch):
        return torch.tensor(batch) * scale

    class EveryOther(Sampler):
        def __init__(self, size):
            self.size = size

        def __iter__(self):
            return iter(range(0, self.size, 2))

        def __len__(self):
            return self.size // 2

    class Local(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            return index

    first = DataLoader(Numbers(), num_workers=2, collate_fn=collate, sampler=EveryOther(10))
    second = DataLoader(
        Local(),
        num_workers=2,
        collate_fn=functools.partial(collate),
        multiprocessing_context="spawn",
    )
    return first, second


if __name__ == "__main__":
    for loader in build(2):
        print(list(loader))
