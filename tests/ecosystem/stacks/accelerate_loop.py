"""An ``accelerate`` training loop: ``Accelerator.prepare`` wraps torch's DataLoader."""

from __future__ import annotations

import torch
from accelerate import Accelerator
from eco_plan import Files, record


def main() -> None:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(Files(), batch_size=8, shuffle=True, num_workers=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, idx in loader:
        record(idx)
        loss = model(x).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
