# expect: LD106
# ruff: noqa
# A handle opened by an object the Dataset keeps two attributes down; the lazy one is fine.
import h5py
import lmdb
from torch.utils.data import DataLoader, Dataset


class H5Reader:
    def __init__(self, path):
        self.file = h5py.File(path, "r")

    def read(self, i):
        return self.file["x"][i]


class LazyReader:
    def __init__(self, path):
        self.path = path
        self.env = None

    def read(self, i):
        if self.env is None:
            self.env = lmdb.open(self.path)
        return self.env.begin().get(str(i).encode())


class Store:
    def __init__(self, path):
        self.reader = H5Reader(path)
        self.lazy = LazyReader(path)


class Volumes(Dataset):
    def __init__(self, path):
        self.store = Store(path)

    def __getitem__(self, i):
        return self.store.reader.read(i), self.store.lazy.read(i)

    def __len__(self):
        return 10


if __name__ == "__main__":
    for batch in DataLoader(Volumes("a.h5"), num_workers=2):
        pass
