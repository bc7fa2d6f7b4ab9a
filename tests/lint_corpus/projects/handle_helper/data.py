import lmdb
from torch.utils.data import DataLoader, Dataset

from storage import db_path, open_db


class Texts(Dataset):
    def __init__(self, root):
        self.env = open_db(root)

    def __len__(self):
        return 8

    def __getitem__(self, index):
        with self.env.begin() as txn:
            return txn.get(str(index).encode())


class LazyTexts(Dataset):
    """The twin: the helper gives a path, and the handle is opened in the worker."""

    def __init__(self, root):
        self.path = db_path(root)
        self.env = None

    def __len__(self):
        return 8

    def __getitem__(self, index):
        if self.env is None:
            self.env = lmdb.open(self.path, readonly=True, lock=False)
        with self.env.begin() as txn:
            return txn.get(str(index).encode())


def main():
    for dataset in (Texts("db"), LazyTexts("db")):
        for batch in DataLoader(dataset, num_workers=2):
            pass
