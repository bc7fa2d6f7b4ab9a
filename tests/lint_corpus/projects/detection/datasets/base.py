import json

import cv2
from torch.utils.data import Dataset


class BaseDetection(Dataset):
    """Images and boxes from a COCO-style annotation file."""

    def __init__(self, root, annotation_file):
        self.root = root
        self.annotations = self._load_annotations(annotation_file)

    def _load_annotations(self, path):
        with open(path) as handle:
            data = json.load(handle)
        return [
            {"file": image["file_name"], "boxes": image.get("boxes", [])}
            for image in data["images"]
        ]

    def __len__(self):
        return len(self.annotations)

    def __getitem__(self, index):
        record = self.annotations[index]
        image = cv2.cvtColor(cv2.imread(f"{self.root}/{record['file']}"), cv2.COLOR_BGR2RGB)
        return self.transform(image), record["boxes"]

    def transform(self, image):
        return image
