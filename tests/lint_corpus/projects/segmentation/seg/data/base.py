import cv2
import numpy as np
from torch.utils.data import Dataset

from seg.utils.io import load_json


class SegBase(Dataset):
    def __init__(self, root, split):
        self.root = root
        self.items = load_json(f"{root}/{split}.json")
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        item = self.items[index]
        image = cv2.imread(f"{self.root}/{item['image']}")
        if self.rng.random() < 0.5:
            image = image[:, ::-1]
        return image
