from os.path import splitext

import numpy as np
from imageio import imread


def read_gen(file_name):
    ext = splitext(file_name)[-1]
    if ext in (".png", ".jpeg", ".ppm", ".jpg"):
        return imread(file_name)
    return np.load(file_name)
