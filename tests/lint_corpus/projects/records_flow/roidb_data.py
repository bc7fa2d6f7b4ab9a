import json
import pickle

import numpy as np
from torch.utils.data import Dataset


def get_database(raw):
    return [dict(image=item["file"], boxes=item["boxes"]) for item in raw]


class Records(Dataset):
    def __init__(self, path):
        with open(path) as f:
            self.data = get_database(json.load(f))

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index]


class RoiDataset(Dataset):
    def __init__(self, roidb, size):
        self.roidb = roidb
        self.size = size

    def __len__(self):
        return len(self.roidb)

    def __getitem__(self, index):
        return self.roidb[index]


class LabelCache(Dataset):
    def __init__(self, cache_path):
        cache = np.load(cache_path, allow_pickle=True).item()
        labels, shapes = zip(*cache.values())
        self.labels = list(labels)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return self.labels[index]


def combined_roidb(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def as_arrays(raw):
    return np.array([item["file"] for item in raw], dtype=np.str_)


class Files(Dataset):
    def __init__(self, path):
        with open(path) as f:
            self.files = as_arrays(json.load(f))

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        return self.files[index]


class Boxes(Dataset):
    """Built only by the pickling check of train.py, from a list of three ints."""

    def __init__(self, boxes):
        self.boxes = boxes

    def __len__(self):
        return len(self.boxes)

    def __getitem__(self, index):
        return self.boxes[index]
