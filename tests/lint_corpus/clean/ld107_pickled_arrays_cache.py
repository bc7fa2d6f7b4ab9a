# expect:
# ruff: noqa
# A pickle cache of the numpy arrays __init__ builds when there is none (PointNet's ModelNet
# loader): reading it touches only the list and the array headers, so it is info, not a warning.
import os
import pickle

import numpy as np
from torch.utils.data import DataLoader, Dataset


def farthest_points(points, count):
    chosen = np.zeros(count, dtype=np.int64)
    return points[chosen]


class PointClouds(Dataset):
    def __init__(self, files, cache, uniform=False):
        if not os.path.exists(cache):
            self.points = [None] * len(files)
            for index, name in enumerate(files):
                cloud = np.loadtxt(name, delimiter=",").astype(np.float32)
                if uniform:
                    cloud = farthest_points(cloud, 1024)
                else:
                    cloud = cloud[:1024, :]
                self.points[index] = cloud
            with open(cache, "wb") as f:
                pickle.dump(self.points, f)
        else:
            with open(cache, "rb") as f:
                self.points = pickle.load(f)

    def __len__(self):
        return len(self.points)

    def __getitem__(self, index):
        return self.points[index]


def main(files):
    for batch in DataLoader(PointClouds(files, "cache.pkl"), num_workers=4):
        pass
