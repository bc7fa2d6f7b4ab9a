# expect: LD107 LD107 LD107 LD107
# ruff: noqa
# Records written as Python literals, one per line, and one dict of numpy arrays per item.
import ast

import numpy as np
from torch.utils.data import DataLoader, Dataset


class Evaluated(Dataset):
    def __init__(self, path):
        with open(path) as f:
            self.records = [eval(line) for line in f]

    def __getitem__(self, index):
        return self.records[index]["file"]

    def __len__(self):
        return len(self.records)


class Literal(Dataset):
    def __init__(self, path):
        self.records = []
        for line in open(path):
            self.records.append(ast.literal_eval(line.strip()))

    def __getitem__(self, index):
        return self.records[index]

    def __len__(self):
        return len(self.records)


class Clouds(Dataset):
    def __init__(self, files):
        self.samples = []
        for name in files:
            cloud = np.load(name)
            self.samples.append({"points": cloud[:, :3], "labels": cloud[:, 3]})

    def __getitem__(self, index):
        return self.samples[index]["points"]

    def __len__(self):
        return len(self.samples)


class Boxes(Dataset):
    def __init__(self, label_path):
        self.truth = {}
        for line in open(label_path):
            name, *boxes = line.split(" ")
            self.truth[name] = []
            for box in boxes:
                self.truth[name].append([int(float(v)) for v in box.split(",")])
        self.names = list(self.truth)

    def __getitem__(self, index):
        return self.truth[self.names[index]]

    def __len__(self):
        return len(self.names)


if __name__ == "__main__":
    for dataset in (Evaluated("a.txt"), Literal("b.txt"), Clouds(["c.npy"]), Boxes("d.txt")):
        for batch in DataLoader(dataset, num_workers=2):
            pass
