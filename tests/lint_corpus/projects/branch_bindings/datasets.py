import h5py
import numpy as np
from torch.utils.data import Dataset


class EagerVolumes(Dataset):
    def __init__(self, path):
        self.file = h5py.File(path, "r")

    def __len__(self):
        return len(self.file["volumes"])

    def __getitem__(self, index):
        return self.file["volumes"][index]


class LazyVolumes(Dataset):
    def __init__(self, path):
        self.path = path
        self.file = None
        with h5py.File(path, "r") as opened:
            self.length = len(opened["volumes"])

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if self.file is None:
            self.file = h5py.File(self.path, "r")
        return self.file["volumes"][index]


class Slices(Dataset):
    def __init__(self, volumes, transform=None):
        self.volumes = volumes
        self.transform = transform

    def __len__(self):
        return len(self.volumes)

    def __getitem__(self, index):
        volume = np.asarray(self.volumes[index])
        return self.transform(volume) if self.transform else volume
