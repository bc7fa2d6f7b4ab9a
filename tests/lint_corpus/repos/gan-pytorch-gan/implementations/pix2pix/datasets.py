import glob
import os

import numpy as np
import torchvision.transforms as transforms
from PIL import Image
from torch.utils.data import Dataset


class ImageDataset(Dataset):
    def __init__(self, root, transforms_=None, mode="train"):
        self.transform = transforms.Compose(transforms_)
        self.files = sorted(glob.glob(os.path.join(root, mode) + "/*.*"))  # deny: LD107

    def __getitem__(self, index):
        img = Image.open(self.files[index % len(self.files)])
        if np.random.random() < 0.5:
            img = Image.fromarray(np.array(img)[:, ::-1, :], "RGB")
        return self.transform(img)

    def __len__(self):
        return len(self.files)
