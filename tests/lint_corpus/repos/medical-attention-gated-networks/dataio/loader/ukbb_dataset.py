import os

import numpy as np
import torch.utils.data as data


class UKBBDataset(data.Dataset):
    def __init__(self, root_dir, split="train", transform=None):
        self.image_filenames = sorted(os.listdir(os.path.join(root_dir, split, "image")))
        self.transform = transform

    def __getitem__(self, index):
        return np.load(self.image_filenames[index])

    def __len__(self):
        return len(self.image_filenames)
