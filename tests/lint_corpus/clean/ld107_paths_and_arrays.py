# expect:
# What is not a copy-on-read finding: file names (info at most), data turned into numpy
# arrays, a DataFrame kept whole, scalars read from loaded data, a Dataset with 0 workers.
import json
import os

import numpy as np
import pandas as pd
from torch.utils.data import DataLoader, Dataset


class Files(Dataset):
    def __init__(self, root):
        self.paths = sorted(os.path.join(root, name) for name in os.listdir(root))

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        return self.paths[index]


class Arrays(Dataset):
    def __init__(self, path):
        with open(path) as handle:
            data = json.load(handle)
        self.labels = np.array([record["label"] for record in data], dtype=np.int64)
        self.names = [record["file"] for record in data]
        self.names = np.array(self.names, dtype=np.str_)
        self.count = len(data)
        self.frame = pd.read_parquet(path + ".parquet")

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        return self.names[index], self.labels[index], self.frame.iloc[index]


class Small(Dataset):
    def __init__(self, path):
        with open(path) as handle:
            self.records = json.load(handle)

    def __len__(self):
        return len(self.records)

    def __getitem__(self, index):
        return self.records[index]


def main():
    return DataLoader(Files("."), num_workers=4), DataLoader(Arrays("a.json"), num_workers=4), DataLoader(Small("s.json"), num_workers=0)
