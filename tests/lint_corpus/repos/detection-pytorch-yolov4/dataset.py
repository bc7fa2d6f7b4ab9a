import os

import cv2
from torch.utils.data.dataset import Dataset


class Yolo_dataset(Dataset):
    def __init__(self, label_path, cfg, train=True):
        self.cfg = cfg
        self.train = train
        truth = {}
        f = open(label_path, "r", encoding="utf-8")
        for line in f.readlines():
            data = line.split(" ")
            truth[data[0]] = []
            for i in data[1:]:
                truth[data[0]].append([int(float(j)) for j in i.split(",")])
        self.truth = truth  # want: LD107
        self.imgs = list(self.truth.keys())

    def __len__(self):
        return len(self.truth.keys())

    def __getitem__(self, index):
        img_path = self.imgs[index]
        bboxes = self.truth.get(img_path)
        img = cv2.imread(os.path.join(self.cfg.dataset_dir, img_path))
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)  # want: LD108
        return img, bboxes
