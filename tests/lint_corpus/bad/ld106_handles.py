# expect: LD106 LD106 LD106
# ruff: noqa
import sqlite3

import h5py
import lmdb
from torch.utils.data import Dataset


class H5Frames(Dataset):
    def __init__(self, path):
        self.file = h5py.File(path, "r")
        self.length = len(self.file["frames"])

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return self.file["frames"][index]


class LmdbImages(Dataset):
    def __init__(self, path):
        self.env = lmdb.open(path, readonly=True, lock=False)

    def __len__(self):
        return 1000

    def __getitem__(self, index):
        with self.env.begin() as txn:
            return txn.get(str(index).encode())


class SqlRows(Dataset):
    def __init__(self, path):
        self.db = sqlite3.connect(path)
        self.count = 10

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        return self._row(index)

    def _row(self, index):
        return self.db.execute("SELECT * FROM rows WHERE id = ?", (index,)).fetchone()
