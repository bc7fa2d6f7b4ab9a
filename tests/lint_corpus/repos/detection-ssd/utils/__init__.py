from .augmentations import SSDAugmentation
