# expect:
# Paths kept in __init__, handles opened once per worker; a probe opened and closed in
# __init__; an .npy loaded into memory; a handle opened in a Dataset used with 0 workers.
import h5py
import numpy as np
from torch.utils.data import DataLoader, Dataset


class LazyH5(Dataset):
    def __init__(self, path):
        self.path = path
        self.file = None
        probe = h5py.File(path, "r")
        self.length = len(probe["x"])
        probe.close()
        self.labels = np.load(path + ".labels.npy")

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if self.file is None:
            self.file = h5py.File(self.path, "r")
        return self.file["x"][index], self.labels[index]


class InProcess(Dataset):
    def __init__(self, path):
        self.file = h5py.File(path, "r")

    def __len__(self):
        return 10

    def __getitem__(self, index):
        return self.file["x"][index]


def main():
    return DataLoader(LazyH5("a.h5"), num_workers=4), DataLoader(InProcess("b.h5"))
