# expect: LD106 LD106 LD106 LD106 LD106 LD106 LD106
# ruff: noqa
# Handles opened in __init__ (directly or in a helper it calls) and used in __getitem__.
import sqlite3
import tarfile
import zipfile

import boto3
import h5py
import lmdb
import numpy as np
import requests
from torch.utils.data import DataLoader, Dataset


class Archives(Dataset):
    def __init__(self, root):
        self.zip = zipfile.ZipFile(root + "/images.zip")
        self.tar = tarfile.open(root + "/labels.tar")
        self.s3 = boto3.client("s3")
        self.http = requests.Session()
        self.features = np.load(open(root + "/features.npy", "rb"))
        self._open_index(root)

    def _open_index(self, root):
        self.env = lmdb.open(root + "/index.lmdb", readonly=True)

    def __len__(self):
        return 100

    def __getitem__(self, index):
        image = self.zip.read(f"{index}.jpg")
        label = self.tar.extractfile(f"{index}.txt")
        extra = self.s3.get_object(Bucket="b", Key=str(index))
        page = self.http.get(f"https://example.com/{index}")
        with self.env.begin() as txn:
            meta = txn.get(str(index).encode())
        return image, label, extra, page, meta, self.features[index]


class Tables(Dataset):
    def __init__(self, path):
        self.db = self._connect(path)

    def _connect(self, path):
        return sqlite3.connect(path)

    def __len__(self):
        return 10

    def __getitem__(self, index):
        return self.db.execute("select x from t where i = ?", (index,)).fetchone()


def main():
    return DataLoader(Archives("data"), num_workers=4), DataLoader(Tables("t.db"), num_workers=2)
