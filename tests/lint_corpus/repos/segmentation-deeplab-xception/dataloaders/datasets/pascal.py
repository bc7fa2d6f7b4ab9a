import os

from PIL import Image
from torch.utils.data import Dataset


class VOCSegmentation(Dataset):
    def __init__(self, args, base_dir="VOC2012", split="train"):
        self._image_dir = os.path.join(base_dir, "JPEGImages")
        with open(os.path.join(base_dir, "ImageSets", split + ".txt")) as f:
            lines = f.read().splitlines()
        self.images = [os.path.join(self._image_dir, line + ".jpg") for line in lines]

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return Image.open(self.images[index]).convert("RGB")
