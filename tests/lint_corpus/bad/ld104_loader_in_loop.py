# expect: LD104 LD104
# ruff: noqa
import torch
from torch.utils.data import DataLoader, TensorDataset


def train(model, optimizer, steps, workers=4):
    dataset = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    for _step in range(steps):
        loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=4)
        inputs, targets = next(iter(loader))
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def evaluate(model, dataset, val_dataset):
    train_loader = DataLoader(dataset, batch_size=32, num_workers=2)
    for inputs, _ in train_loader:
        val_loader = DataLoader(val_dataset, batch_size=32, num_workers=2)
        for val_inputs, _ in val_loader:
            model(inputs) + model(val_inputs).mean()


if __name__ == "__main__":
    net = torch.nn.Linear(8, 1)
    train(net, torch.optim.SGD(net.parameters(), lr=0.01), steps=3)
