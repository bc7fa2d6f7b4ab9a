import os

import pycocotools.coco as coco
import torch.utils.data as data


class COCO(data.Dataset):
    num_classes = 80

    def __init__(self, opt, split):
        self.img_dir = os.path.join(opt.data_dir, f"{split}2017")
        self.annot_path = os.path.join(opt.data_dir, "annotations", f"instances_{split}2017.json")
        self.coco = coco.COCO(self.annot_path)  # want: LD107
        self.images = self.coco.getImgIds()
        self.num_samples = len(self.images)

    def __len__(self):
        return self.num_samples
