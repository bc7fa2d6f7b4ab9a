import os

import numpy as np
from torch.utils.data import Dataset


class SunrgbdDetectionVotesDataset(Dataset):
    def __init__(self, split_set="train", augment=False):
        self.data_path = os.path.join("data", f"sunrgbd_pc_bbox_votes_50k_v1_{split_set}")
        self.scan_names = sorted({x[0:6] for x in os.listdir(self.data_path)})
        self.augment = augment

    def __len__(self):
        return len(self.scan_names)

    def __getitem__(self, idx):
        return np.load(os.path.join(self.data_path, self.scan_names[idx]) + "_pc.npz")["pc"]
