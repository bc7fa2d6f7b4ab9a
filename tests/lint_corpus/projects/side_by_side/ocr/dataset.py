import lmdb
from torch.utils.data import Dataset


class LmdbText(Dataset):
    def __init__(self, root):
        self.env = lmdb.open(root, readonly=True)

    def __len__(self):
        return 100

    def __getitem__(self, index):
        with self.env.begin() as txn:
            return txn.get(str(index).encode())
