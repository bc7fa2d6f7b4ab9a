# expect: LD101
# ruff: noqa
# `score = evaluate()` runs at import; evaluate() builds and iterates a worker DataLoader.
import torch
from torch.utils.data import DataLoader, TensorDataset


def evaluate():
    loader = DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=4, num_workers=2)
    return sum(float(batch.sum()) for (batch,) in loader)


score = evaluate()
print(score)
