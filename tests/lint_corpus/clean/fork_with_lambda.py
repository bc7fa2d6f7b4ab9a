# expect:
# ruff: noqa
"""Linux-only script that deliberately uses fork, so lambdas are never pickled."""

import multiprocessing as mp

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    dataset = TensorDataset(torch.randn(512, 10))
    loader = DataLoader(
        dataset,
        batch_size=64,
        num_workers=4,
        collate_fn=lambda batch: torch.cat([item[0][None] for item in batch]),
        worker_init_fn=lambda worker_id: torch.set_num_threads(1),
    )
    for batch in loader:
        print(batch.shape)


if __name__ == "__main__":
    mp.set_start_method("fork")
    main()
