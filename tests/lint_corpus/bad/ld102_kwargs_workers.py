# expect: LD102
# ruff: noqa
# **kwargs may carry num_workers: a lambda collate_fn is then pickled into the workers.
from torch.utils.data import DataLoader


def build_loader(dataset, **loader_kwargs):
    return DataLoader(dataset, collate_fn=lambda batch: batch, **loader_kwargs)
