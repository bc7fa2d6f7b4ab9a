# expect: LD101
# ruff: noqa
import torch
from torch.utils.data import DataLoader, TensorDataset

dataset = TensorDataset(torch.randn(64, 3), torch.randint(0, 2, (64,)))
loader = DataLoader(dataset, batch_size=8, shuffle=True, num_workers=4)

model = torch.nn.Linear(3, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for inputs, targets in loader:
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(inputs), targets).backward()
    optimizer.step()
