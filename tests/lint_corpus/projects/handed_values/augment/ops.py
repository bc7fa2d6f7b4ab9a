import cv2
import numpy as np

scale_to_unit = lambda image: image.astype(np.float32) / 255.0


class Resize:
    def __init__(self, size):
        self.size = size

    def __call__(self, image):
        return cv2.resize(image, (self.size, self.size))


class Flip:
    def __call__(self, image):
        return image[:, ::-1] if np.random.rand() < 0.5 else image


def rotate(image, degrees):
    height, width = image.shape[:2]
    matrix = cv2.getRotationMatrix2D((width / 2, height / 2), degrees, 1)
    return cv2.warpAffine(image, matrix, (width, height))


def invert(image, _):
    return 255 - image


OPERATIONS = {"rotate": rotate, "invert": invert}
