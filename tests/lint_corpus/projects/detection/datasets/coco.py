import h5py

from .base import BaseDetection


class CocoBoxes(BaseDetection):
    """Adds precomputed features, read from one HDF5 file."""

    def __init__(self, root, annotation_file, features):
        super().__init__(root, annotation_file)
        self.features = h5py.File(features, "r")

    def __getitem__(self, index):
        image, boxes = super().__getitem__(index)
        return image, boxes, self.features["x"][index]
