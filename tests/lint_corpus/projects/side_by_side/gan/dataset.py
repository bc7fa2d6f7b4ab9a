import lmdb
from torch.utils.data import Dataset


class MultiResolution(Dataset):
    def __init__(self, path, resolution=256):
        self.env = lmdb.open(path, readonly=True, lock=False)
        self.resolution = resolution

    def __len__(self):
        return 100

    def __getitem__(self, index):
        with self.env.begin(write=False) as txn:
            return txn.get(f"{self.resolution}-{index}".encode())
