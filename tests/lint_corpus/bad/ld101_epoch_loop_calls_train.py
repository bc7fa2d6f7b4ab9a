# expect: LD101
# ruff: noqa
# A script without a main guard: the epoch loop at top level calls train(), which iterates a
# DataLoader built at module level. Under spawn every worker re-runs this loop.
import torch
from torch.utils.data import DataLoader, TensorDataset

dataset = TensorDataset(torch.randn(64, 3))
loader = DataLoader(dataset, batch_size=8, shuffle=True, num_workers=4)


def train(epoch):
    for (batch,) in loader:
        batch.sum()


for epoch in range(3):
    train(epoch)
