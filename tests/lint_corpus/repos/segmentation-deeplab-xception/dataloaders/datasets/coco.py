import os

import torch
from PIL import Image
from pycocotools.coco import COCO
from torch.utils.data import DataLoader, Dataset


class COCOSegmentation(Dataset):
    def __init__(self, args, base_dir="coco", split="train", year="2017"):
        ann_file = os.path.join(base_dir, f"annotations/instances_{split}{year}.json")
        self.img_dir = os.path.join(base_dir, f"images/{split}{year}")
        self.coco = COCO(ann_file)  # want: LD107
        self.ids = list(self.coco.imgs.keys())

    def __getitem__(self, index):
        coco = self.coco
        img_id = self.ids[index]
        img_metadata = coco.loadImgs(img_id)[0]
        image = Image.open(os.path.join(self.img_dir, img_metadata["file_name"]))
        target = coco.loadAnns(coco.getAnnIds(imgIds=img_id))
        return image, target

    def __len__(self):
        return len(self.ids)


if __name__ == "__main__":
    coco_val = COCOSegmentation(None, split="val")
    for sample in DataLoader(coco_val, batch_size=4, shuffle=True, num_workers=0):
        print(sample)
