"""An ``accelerate`` training loop: ``Accelerator.prepare`` wraps torch's DataLoader; with
``stateful``, in torchdata's ``StatefulDataLoader`` (``use_stateful_dataloader=True``), whose
``state_dict()`` the loop takes half-way, as a checkpoint would."""

from __future__ import annotations

import sys

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from eco_plan import Files, record


def main(stateful: bool) -> None:
    config = DataLoaderConfiguration(use_stateful_dataloader=stateful)
    accelerator = Accelerator(cpu=True, dataloader_config=config)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(Files(), batch_size=8, shuffle=True, num_workers=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for step, (x, idx) in enumerate(loader):
        record(idx)
        loss = model(x).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if stateful and step == 4:
            loader.state_dict()


if __name__ == "__main__":
    main(stateful=sys.argv[1:] == ["stateful"])
