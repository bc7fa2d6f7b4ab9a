# expect:
# The same shapes as the LD101 corpus, with the top level behind the main guard, and loaders
# only measured (len) at import.
import torch
from torch.utils.data import DataLoader, TensorDataset

splits = {"train": TensorDataset(torch.randn(32, 2)), "val": TensorDataset(torch.randn(8, 2))}
loaders = {name: DataLoader(data, batch_size=4, num_workers=2) for name, data in splits.items()}
print({name: len(loader) for name, loader in loaders.items()})


def train(epoch):
    for (batch,) in loaders["train"]:
        batch.sum()


def evaluate():
    return sum(float(batch.sum()) for (batch,) in loaders["val"])


if __name__ == "__main__":
    for epoch in range(3):
        train(epoch)
    score = evaluate()
