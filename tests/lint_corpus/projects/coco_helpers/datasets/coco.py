import numpy as np
from pycocotools.coco import COCO

from .wrapper import CacheDataset


class CocoBoxes(CacheDataset):
    """Derives from a Dataset of a module read after this one; its records come from a helper."""

    def __init__(self, annotation_file):
        self.coco = COCO(annotation_file)
        self.ids = self.coco.getImgIds()
        self.annotations = self._load_annotations()

    def __len__(self):
        return len(self.ids)

    def _load_annotations(self):
        return [self._record(image_id) for image_id in self.ids]

    def _record(self, image_id):
        image = self.coco.loadImgs(image_id)[0]
        boxes = np.zeros((0, 4))
        return boxes, (image["height"], image["width"]), image["file_name"]

    def __getitem__(self, index):
        boxes, size, file_name = self.annotations[index]
        return self.read(file_name), boxes


class CocoSizes(CacheDataset):
    """The twin: only numbers computed here are kept per image, in one numpy array."""

    def __init__(self, annotation_file):
        coco = COCO(annotation_file)
        self.sizes = np.array([self._size(coco, i) for i in coco.getImgIds()])

    def __len__(self):
        return len(self.sizes)

    def _size(self, coco, image_id):
        image = coco.loadImgs(image_id)[0]
        return image["height"], image["width"]

    def __getitem__(self, index):
        return self.sizes[index]
