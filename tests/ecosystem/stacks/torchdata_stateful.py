"""torchdata's ``StatefulDataLoader``, checkpointed half-way by its ``state_dict``."""

from __future__ import annotations

import torch
from eco_plan import SAMPLES, fault, record
from torchdata.stateful_dataloader import StatefulDataLoader


class Files(torch.utils.data.Dataset):
    def __init__(self) -> None:
        self.files = [f"/data/files/{i:04d}.bin" for i in range(SAMPLES)]

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> int:
        fault(index)
        return index


def main() -> None:
    loader = StatefulDataLoader(Files(), batch_size=8, num_workers=2)
    for step, idx in enumerate(loader):
        record(idx)
        if step == 4:
            loader.state_dict()


if __name__ == "__main__":
    main()
