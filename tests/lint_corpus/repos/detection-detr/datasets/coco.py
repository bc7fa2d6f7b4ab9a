import torchvision


class CocoDetection(torchvision.datasets.CocoDetection):  # want: LD107
    def __init__(self, img_folder, ann_file, transforms, return_masks):
        super(CocoDetection, self).__init__(img_folder, ann_file)
        self._transforms = transforms

    def __getitem__(self, idx):
        img, target = super(CocoDetection, self).__getitem__(idx)
        target = {"image_id": self.ids[idx], "annotations": target}
        if self._transforms is not None:
            img, target = self._transforms(img, target)
        return img, target


def build(image_set, args):
    return CocoDetection(f"{args.coco_path}/{image_set}2017", args.ann_file, None, False)
