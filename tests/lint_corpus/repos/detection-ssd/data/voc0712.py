import os.path as osp

import cv2
import torch.utils.data as data


class VOCDetection(data.Dataset):
    def __init__(self, root, image_sets=(("2007", "trainval"),), transform=None):
        self.root = root
        self.transform = transform
        self.ids = []
        for year, name in image_sets:
            rootpath = osp.join(self.root, "VOC" + year)
            for line in open(osp.join(rootpath, "ImageSets", "Main", name + ".txt")):
                self.ids.append((rootpath, line.strip()))

    def __getitem__(self, index):
        return self.pull_item(index)  # want: LD108

    def __len__(self):
        return len(self.ids)

    def pull_item(self, index):
        img_id = self.ids[index]
        img = cv2.imread(osp.join(img_id[0], "JPEGImages", img_id[1] + ".jpg"))
        if self.transform is not None:
            img, boxes, labels = self.transform(img, None, None)
        return img
