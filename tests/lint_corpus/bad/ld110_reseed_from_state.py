# expect: LD102 LD110 LD110 LD110 LD110
# ruff: noqa
import imgaug as ia
import numpy as np
import torch
from torch.utils.data import DataLoader


def worker_init_fn(worker_id):
    np.random.seed(np.random.get_state()[1][0] + worker_id)


def imgaug_worker_init(worker_id):
    ia.seed(np.random.get_state()[1][0] + worker_id)


def reseed_fixed(worker_id, rank=0, seed=42):
    worker_seed = rank + seed + worker_id
    np.random.seed(worker_seed)
    torch.manual_seed(worker_seed)  # one finding per worker_init_fn


def reseed_from_torch(worker_id):
    np.random.seed(torch.initial_seed() % 2**32)  # the right way: not flagged


def main(dataset):
    loader = DataLoader(dataset, num_workers=4, worker_init_fn=worker_init_fn)
    fixed = DataLoader(dataset, num_workers=4, worker_init_fn=reseed_fixed)
    good = DataLoader(dataset, num_workers=4, worker_init_fn=reseed_from_torch)
    other = DataLoader(
        dataset,
        num_workers=4,
        worker_init_fn=lambda worker_id: np.random.seed(np.random.get_state()[1][0] + worker_id),
    )
    return loader, other


if __name__ == "__main__":
    main(list(range(8)))
