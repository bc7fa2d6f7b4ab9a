# expect: LD101 LD101 LD101
# ruff: noqa
# Loaders that project functions return, iterated by the script's own top-level code.
from torch.utils.data import DataLoader, TensorDataset
import torch


def get_loader(batch_size, workers=4):
    dataset = TensorDataset(torch.zeros(64, 3))
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers)
    return loader


class Loaders:
    def build(self, workers):
        self.train = DataLoader(TensorDataset(torch.zeros(8)), num_workers=workers)
        return self

    def load_data(self):
        return self.train


def make_loaders(workers):
    return Loaders().build(workers)


def cycle(loader):
    while True:
        for batch in loader:
            yield batch


class Trainer:
    def __init__(self, workers):
        self.dataloader = cycle(DataLoader(TensorDataset(torch.zeros(8)), num_workers=workers))

    def train(self, steps):
        for _ in range(steps):
            next(self.dataloader)


def get_serial_loader():
    return DataLoader(TensorDataset(torch.zeros(8)), num_workers=0)


train_loader = get_loader(16)
val = make_loaders(2).load_data()
serial = get_serial_loader()
unused = get_loader(8)  # built, never iterated at import: no workers start
trainer = Trainer(2)

for epoch in range(2):
    for batch in train_loader:
        pass
    for batch in enumerate(val):
        pass
    for batch in serial:
        pass
    trainer.train(10)
