import os

import cv2
import numpy as np
from torch.utils.data import Dataset


def make_dataset(split="train", data_root=None, data_list=None):
    image_label_list = []
    for line in open(data_list).readlines():
        line_split = line.strip().split(" ")
        image_name = os.path.join(data_root, line_split[0])
        label_name = os.path.join(data_root, line_split[1])
        image_label_list.append((image_name, label_name))
    return image_label_list


class SemData(Dataset):
    def __init__(self, split="train", data_root=None, data_list=None, transform=None):
        self.split = split
        self.data_list = make_dataset(split, data_root, data_list)  # deny: LD107
        self.transform = transform

    def __len__(self):
        return len(self.data_list)

    def __getitem__(self, index):
        image_path, label_path = self.data_list[index]
        image = cv2.imread(image_path, cv2.IMREAD_COLOR)  # deny: LD108
        label = cv2.imread(label_path, cv2.IMREAD_GRAYSCALE)
        return self.transform(np.float32(image), label)
