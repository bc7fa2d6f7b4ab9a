import os

import numpy as np
from torch.utils.data import Dataset


class ScannetDetectionDataset(Dataset):
    def __init__(self, split_set="train", augment=False):
        self.data_path = os.path.join("data", "scannet_train_detection_data")
        with open(f"meta_data/scannetv2_{split_set}.txt") as f:
            self.scan_names = f.read().splitlines()  # deny: LD107
        self.augment = augment

    def __len__(self):
        return len(self.scan_names)

    def __getitem__(self, idx):
        scan_name = self.scan_names[idx]
        points = np.load(os.path.join(self.data_path, scan_name) + "_vert.npy")
        if self.augment and np.random.random() > 0.5:
            points[:, 0] = -1 * points[:, 0]
        return points
