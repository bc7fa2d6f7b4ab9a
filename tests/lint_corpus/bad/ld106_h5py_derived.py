# expect: LD106 LD106
# ruff: noqa
# The classic h5py case: the file opened in __init__, a dataset of it kept and read per item
# (issue 26 item 4); in Dead the file itself is read only in a branch that never runs.
import h5py
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __init__(self, path):
        self.file = h5py.File(path, "r")
        self.images = self.file["images"]

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.images[index]


class Dead(Dataset):
    def __init__(self, path):
        self.file = h5py.File(path, "r")
        self.images = self.file["images"]

    def __len__(self):
        return 10

    def __getitem__(self, index):
        if False:
            print(self.file.filename)
        return self.images[index]


def main():
    for dataset in (Images("x.h5"), Dead("y.h5")):
        for batch in DataLoader(dataset, num_workers=4):
            pass
