# expect: LD101 LD101
# ruff: noqa
import os

import torch
from torch.utils import data

NUM_WORKERS = min(8, os.cpu_count())
dataset = data.TensorDataset(torch.arange(100.0))


def fit(loader):
    return sum(batch[0].sum() for batch in loader)


fit(data.DataLoader(dataset, batch_size=10, num_workers=NUM_WORKERS))
first = next(iter(data.DataLoader(dataset, num_workers=NUM_WORKERS)))
