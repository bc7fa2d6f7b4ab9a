# expect: LD104
# ruff: noqa
# A new DataLoader with 4 workers every epoch: 4 processes started and the Dataset pickled
# into each of them, epoch after epoch.
import torch
from torch.utils.data import DataLoader, TensorDataset


def main(epochs=10):
    dataset = TensorDataset(torch.randn(256, 8))
    model = torch.nn.Linear(8, 1)
    for epoch in range(epochs):
        loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=4)
        for (batch,) in loader:
            model(batch).sum().backward()


if __name__ == "__main__":
    main()
