import os.path as osp

import cv2
import torch.utils.data as data


class COCODetection(data.Dataset):
    def __init__(self, root, image_set="trainval35k", transform=None):
        from pycocotools.coco import COCO

        self.root = osp.join(root, "images", image_set)
        self.coco = COCO(osp.join(root, "annotations", f"instances_{image_set}.json"))  # want: LD107
        self.ids = list(self.coco.imgToAnns.keys())
        self.transform = transform

    def __getitem__(self, index):
        im, gt, h, w = self.pull_item(index)  # want: LD108
        return im, gt

    def __len__(self):
        return len(self.ids)

    def pull_item(self, index):
        img_id = self.ids[index]
        target = self.coco.loadAnns(self.coco.getAnnIds(imgIds=img_id))
        path = osp.join(self.root, self.coco.loadImgs(img_id)[0]["file_name"])
        img = cv2.imread(osp.join(self.root, path))
        height, width, _ = img.shape
        if self.transform is not None:
            img, boxes, labels = self.transform(img, target[:, :4], target[:, 4])
        return img, target, height, width
