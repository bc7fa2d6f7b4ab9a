import sys

import lmdb
from torch.utils.data import Dataset


class LmdbDataset(Dataset):
    def __init__(self, root, opt):
        self.root = root
        self.opt = opt
        self.env = lmdb.open(root, max_readers=32, readonly=True, lock=False)  # want: LD106
        if not self.env:
            sys.exit(0)
        with self.env.begin(write=False) as txn:
            self.nSamples = int(txn.get("num-samples".encode()))

    def __len__(self):
        return self.nSamples

    def __getitem__(self, index):
        with self.env.begin(write=False) as txn:
            return txn.get(f"image-{index + 1:09d}".encode())
