from seg.data.base import SegBase


class VocSeg(SegBase):
    classes = 21

    def __init__(self, root, split="train"):
        super().__init__(root, split)
        self.split = split
