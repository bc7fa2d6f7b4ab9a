import random

from augment.ops import OPERATIONS


class RandomPolicy:
    def __init__(self, names, magnitude):
        self.names = names
        self.magnitude = magnitude

    def __call__(self, image):
        name = random.choice(self.names)
        return OPERATIONS[name](image, self.magnitude)
