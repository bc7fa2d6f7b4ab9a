# expect: LD111 LD113 LD113
# ruff: noqa
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Curriculum(Dataset):
    def __init__(self, images):
        self.images = images
        self.difficulty = 1
        self.size = 128

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.images[index][: self.size] * self.difficulty


def train(model, images, epochs):
    dist.init_process_group("nccl")
    dataset = Curriculum(images)
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=4)
    for epoch in range(epochs):
        for batch in loader:
            model(batch)

    persistent = DataLoader(dataset, batch_size=32, num_workers=4, persistent_workers=True)
    for epoch in range(epochs):
        dataset.difficulty = 1 + epoch // 10
        persistent.dataset.size += 32
        for batch in persistent:
            model(batch)


if __name__ == "__main__":
    train(torch.nn.Identity(), [torch.zeros(256)] * 64, 3)
