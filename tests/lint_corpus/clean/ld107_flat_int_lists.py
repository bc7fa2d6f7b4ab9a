# expect:
# ruff: noqa
# Flat lists of class ids and indices taken from loaded data: small ints, not a table of records.
import json

import numpy as np
from torch.utils.data import DataLoader, Dataset


class Labelled(Dataset):
    def __init__(self, path, names):
        with open(path) as f:
            meta = json.load(f)
        class_to_idx = meta["classes"]
        self.labels = [class_to_idx[name] for name in names]
        self.keep = [i for i, ann in enumerate(meta["annotations"]) if ann["iscrowd"] == 0]
        self.volumes = [np.load(name) for name in names]

    def __getitem__(self, index):
        return self.volumes[self.keep[index]], self.labels[index]

    def __len__(self):
        return len(self.keep)


if __name__ == "__main__":
    for batch in DataLoader(Labelled("meta.json", ["a"]), num_workers=2):
        pass
