# expect:
# ruff: noqa
# Twins of bad/ld106_h5py_derived.py: the file opened lazily per worker, and a handle read only
# in a branch that never runs.
import h5py
from torch.utils.data import DataLoader, Dataset


class Lazy(Dataset):
    def __init__(self, path):
        self.path = path
        self.images = None

    def __len__(self):
        return 10

    def __getitem__(self, index):
        if self.images is None:
            self.images = h5py.File(self.path, "r")["images"]
        return self.images[index]


class OnlyDead(Dataset):
    def __init__(self, path):
        self.file = h5py.File(path, "r")

    def __len__(self):
        return 10

    def __getitem__(self, index):
        if False:
            return self.file["x"][index]
        return index


class CacheOff(Dataset):
    """The raw file is read only when a cache flag, off for good, is on."""

    def __init__(self, path):
        self.raw = h5py.File(path, "r")
        self.use_raw = False

    def __len__(self):
        return 10

    def __getitem__(self, index):
        if self.use_raw:
            return self.raw["x"][index]
        return index


def main():
    for dataset in (Lazy("x.h5"), OnlyDead("y.h5"), CacheOff("z.h5")):
        for batch in DataLoader(dataset, num_workers=4):
            pass
