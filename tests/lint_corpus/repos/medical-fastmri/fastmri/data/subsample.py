import contextlib

import numpy as np


@contextlib.contextmanager
def temp_seed(rng, seed):
    if seed is None:
        yield
    else:
        state = rng.get_state()
        rng.seed(seed)
        try:
            yield
        finally:
            rng.set_state(state)


class MaskFunc:
    def __init__(self, center_fractions, accelerations, seed=None):
        self.center_fractions = center_fractions
        self.accelerations = accelerations
        self.rng = np.random.RandomState(seed)  # deny: LD109

    def __call__(self, shape, offset=None, seed=None):
        with temp_seed(self.rng, seed):
            return self.rng.uniform(size=shape[-2]) < 0.25
