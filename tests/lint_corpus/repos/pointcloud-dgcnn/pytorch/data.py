import glob
import os

import h5py
import numpy as np
from torch.utils.data import Dataset


def load_data(partition):
    all_data = []
    all_label = []
    for h5_name in glob.glob(os.path.join("data", f"ply_data_{partition}*.h5")):
        f = h5py.File(h5_name)
        data = f["data"][:].astype("float32")
        label = f["label"][:].astype("int64")
        f.close()
        all_data.append(data)
        all_label.append(label)
    return np.concatenate(all_data, axis=0), np.concatenate(all_label, axis=0)


class ModelNet40(Dataset):
    def __init__(self, num_points, partition="train"):
        self.data, self.label = load_data(partition)  # deny: LD106, LD107
        self.num_points = num_points
        self.partition = partition

    def __getitem__(self, item):
        pointcloud = self.data[item][: self.num_points]
        if self.partition == "train":
            np.random.shuffle(pointcloud)
        return pointcloud, self.label[item]

    def __len__(self):
        return self.data.shape[0]
