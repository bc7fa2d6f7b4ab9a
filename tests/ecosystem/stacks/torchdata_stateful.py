"""torchdata's ``StatefulDataLoader``, checkpointed half-way by its ``state_dict``."""

from __future__ import annotations

import eco_plan
from eco_plan import record
from torchdata.stateful_dataloader import StatefulDataLoader


class Files(eco_plan.Files):
    def load(self, index: int) -> int:
        return index


def main() -> None:
    loader = StatefulDataLoader(Files(), batch_size=8, num_workers=2)
    for step, idx in enumerate(loader):
        record(idx)
        if step == 4:
            loader.state_dict()


if __name__ == "__main__":
    main()
