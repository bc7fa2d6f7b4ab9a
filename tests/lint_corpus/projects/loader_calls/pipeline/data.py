import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Shapes(Dataset):
    def __init__(self, count):
        self.count = count

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        return torch.from_numpy(np.full((3, 32, 32), index, dtype=np.float32))


def build_loader(count, batch_size=16, num_workers=8):
    return DataLoader(Shapes(count), batch_size=batch_size, shuffle=True, num_workers=num_workers)
