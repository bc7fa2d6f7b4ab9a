import os

import numpy as np
from skimage.io import imread
from torch.utils.data import Dataset


class BrainSegmentationDataset(Dataset):
    def __init__(self, images_dir, subset="train"):
        volumes = {}
        for dirpath, dirnames, filenames in os.walk(images_dir):
            image_slices = [imread(os.path.join(dirpath, f)) for f in sorted(filenames)]
            if image_slices:
                volumes[dirpath.split("/")[-1]] = np.array(image_slices[1:-1])
        self.patients = sorted(volumes)
        self.volumes = [volumes[k] for k in self.patients]  # deny: LD107

    def __len__(self):
        return len(self.volumes)

    def __getitem__(self, idx):
        return self.volumes[idx]
