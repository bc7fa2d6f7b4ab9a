"""torchdata's ``StatefulDataLoader`` with a ``batch_sampler`` of torch's own (not torchdata's
stateful samplers: torchdata resumes it by fast-forwarding a new pass), checkpointed half-way
by its ``state_dict``."""

from __future__ import annotations

import eco_plan
from eco_plan import record
from torch.utils.data import BatchSampler, RandomSampler
from torchdata.stateful_dataloader import StatefulDataLoader


class Files(eco_plan.Files):
    def load(self, index: int) -> int:
        return index


def main() -> None:
    dataset = Files()
    batches = BatchSampler(RandomSampler(dataset), batch_size=8, drop_last=False)
    loader = StatefulDataLoader(dataset, batch_sampler=batches, num_workers=2)
    for step, idx in enumerate(loader):
        record(idx)
        if step == 4:
            loader.state_dict()


if __name__ == "__main__":
    main()
