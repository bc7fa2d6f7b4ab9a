import h5py
import numpy as np
from torch.utils.data import ConcatDataset, DataLoader, Dataset

from pytorch3dunet.datasets.utils import RandomScaler


class AbstractHDF5Dataset(Dataset):
    def __init__(self, file_path, phase, random_scale=None):
        self.file_path = file_path
        self.phase = phase
        with h5py.File(file_path, "r") as f:  # deny: LD106
            self.raw_shape = f["raw"].shape
        if random_scale is not None:
            self.random_scaler = RandomScaler(random_scale, (64, 64, 64), self.raw_shape)
        else:
            self.random_scaler = None
        self.patch_count = int(np.prod(self.raw_shape)) // 64**3

    def get_raw_patch(self, idx):
        raise NotImplementedError

    def __getitem__(self, idx):
        if self.random_scaler is not None:
            idx = self.random_scaler.randomize_indices(idx)
        return self.get_raw_patch(idx)

    def __len__(self):
        return self.patch_count


class LazyHDF5Dataset(AbstractHDF5Dataset):
    def get_raw_patch(self, idx):
        with h5py.File(self.file_path, "r") as f:
            return f["raw"][idx]


def get_train_loaders(config):
    datasets = [LazyHDF5Dataset(path, "train") for path in config["file_paths"]]
    return DataLoader(ConcatDataset(datasets), batch_size=1, shuffle=True, num_workers=config["num_workers"])
