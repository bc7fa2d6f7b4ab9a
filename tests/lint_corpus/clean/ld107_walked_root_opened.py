# expect:
# ruff: noqa
# A folder name from os.walk handed to a Dataset, which opens an LMDB there (lazily): the
# attribute is a handle built from a name, not a list of names (deep-text-recognition-benchmark).
import os

import lmdb
from torch.utils.data import ConcatDataset, DataLoader, Dataset


class Lmdb(Dataset):
    def __init__(self, root):
        self.root = root
        self.env = None
        self.size = lmdb.open(root, readonly=True).stat()["entries"]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        if self.env is None:
            self.env = lmdb.open(self.root, readonly=True, lock=False)
        with self.env.begin() as txn:
            return txn.get(str(index).encode())


def hierarchical(root):
    parts = []
    for folder, subfolders, _ in os.walk(root):
        if not subfolders:
            parts.append(Lmdb(folder))
    return DataLoader(ConcatDataset(parts), num_workers=4)
