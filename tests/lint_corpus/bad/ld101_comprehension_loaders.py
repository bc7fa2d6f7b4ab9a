# expect: LD101
# ruff: noqa
# Loaders built in a dict comprehension, then one batch taken at top level.
import torch
from torch.utils.data import DataLoader, TensorDataset

splits = {"train": TensorDataset(torch.randn(32, 2)), "val": TensorDataset(torch.randn(8, 2))}
loaders = {name: DataLoader(data, batch_size=4, num_workers=2) for name, data in splits.items()}
first = next(iter(loaders["train"]))
