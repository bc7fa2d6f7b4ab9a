# expect:
# ruff: noqa
"""Object detection: variable numbers of boxes per image need a custom collate function."""

import json
import os

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

cv2.setNumThreads(0)
WORKERS = max(2, (os.cpu_count() or 2) // 2)


class CocoLike(Dataset):
    def __init__(self, image_dir, annotation_file):
        self.image_dir = image_dir
        with open(annotation_file) as handle:
            annotations = json.load(handle)
        self.file_names = np.array([image["file_name"] for image in annotations["images"]])
        self.annotation_file = annotation_file
        self._index = None

    def __len__(self):
        return len(self.file_names)

    def _boxes(self, index):
        if self._index is None:  # loaded lazily, once per worker
            with open(self.annotation_file) as handle:
                self._index = json.load(handle)["annotations"]
        return np.array(self._index[index]["bbox"], dtype=np.float32).reshape(-1, 4)

    def __getitem__(self, index):
        image = cv2.imread(os.path.join(self.image_dir, self.file_names[index]))
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        target = {"boxes": torch.from_numpy(self._boxes(index))}
        return torch.from_numpy(image).permute(2, 0, 1), target


def detection_collate(batch):
    images, targets = zip(*batch)
    return list(images), list(targets)


def worker_init(worker_id):
    np.random.seed(torch.initial_seed() % 2**32)


def main():
    dataset = CocoLike("images", "annotations.json")
    loader = DataLoader(
        dataset,
        batch_size=8,
        shuffle=True,
        num_workers=WORKERS,
        collate_fn=detection_collate,
        worker_init_fn=worker_init,
        pin_memory=True,
    )
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    for images, targets in loader:
        images = [image.to(device, non_blocking=True) for image in images]
        targets = [{k: v.to(device) for k, v in t.items()} for t in targets]


if __name__ == "__main__":
    main()
