import os

import numpy as np
from torch.utils.data import Dataset


class S3DISDataset(Dataset):
    def __init__(self, split="train", data_root="trainval_fullarea", num_point=4096):
        rooms = sorted(os.listdir(data_root))
        self.room_points, self.room_labels = [], []
        for room_name in rooms:
            room_data = np.load(os.path.join(data_root, room_name))
            self.room_points.append(room_data[:, 0:6])  # deny: LD107
            self.room_labels.append(room_data[:, 6])
        self.room_idxs = np.array(range(len(rooms)))
        self.num_point = num_point

    def __getitem__(self, idx):
        return self.room_points[self.room_idxs[idx]][: self.num_point]

    def __len__(self):
        return len(self.room_idxs)
