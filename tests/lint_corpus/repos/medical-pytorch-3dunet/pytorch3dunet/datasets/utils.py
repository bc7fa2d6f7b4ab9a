import numpy as np


class RandomScaler:
    """Randomly scales the patch around its center, from a generator of its own."""

    def __init__(self, scale_range, patch_shape, volume_shape, execution_probability=0.5, seed=47):
        self.scale_range = scale_range
        self.patch_shape = patch_shape
        self.volume_shape = volume_shape
        self.execution_probability = execution_probability
        self.rs = np.random.RandomState(seed)  # want: LD109

    def randomize_indices(self, raw_idx):
        if self.rs.uniform() < self.execution_probability:
            return raw_idx
        offsets = [self.rs.randint(self.scale_range) for _ in range(3)]
        return raw_idx + sum(offsets)
