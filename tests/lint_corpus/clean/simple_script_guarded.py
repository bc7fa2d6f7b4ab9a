# expect:
# ruff: noqa
"""The plain tutorial shape: module-level model and data, training under the main guard."""

import torch
import torch.utils.data as data

BATCH_SIZE = 16
dataset = data.TensorDataset(torch.randn(128, 4), torch.randn(128, 1))
train_loader = data.DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=2)
debug_loader = data.DataLoader(dataset, batch_size=4)
model = torch.nn.Linear(4, 1)
print(f"{len(train_loader)} batches per epoch")

if __name__ == "__main__":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(5):
        for inputs, targets in train_loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(inputs), targets).backward()
            optimizer.step()
    for folds in range(3):
        fold = data.Subset(dataset, range(folds, len(dataset), 3))
        fold_loader = data.DataLoader(fold, batch_size=BATCH_SIZE, num_workers=2)
        for inputs, targets in fold_loader:
            model(inputs)
