import sys
from collections import defaultdict

from torch.utils.data import DataLoader

from augment import *
from augment.imgaug_ops import TRAIN_TRANSFORMS
from augment.policy import RandomPolicy
from datasets import Augmented, Frames, ListLoader, Pipeline, Triples


def main(paths, heads, tails):
    splits = {"train": Frames(paths, transform=scale_to_unit), "val": Frames(paths)}
    for batch in DataLoader(dataset=splits["train"], batch_size=8, num_workers=4):
        batch.sum()

    for batch in DataLoader(Pipeline(paths, ["Resize"]), batch_size=8, num_workers=4):
        batch.sum()

    policy = Frames(paths, transform=RandomPolicy(["rotate", "invert"], 15))
    for batch in DataLoader(policy, batch_size=8, num_workers=4):
        batch.sum()

    count = defaultdict(lambda: 4)
    for head, tail in zip(heads, tails):
        count[(head, tail)] += 1
    for batch in DataLoader(Triples(heads, tails, count), batch_size=64, num_workers=4):
        batch[0].sum()

    for batch in ListLoader(Frames(paths, transform=Resize(64)), batch_size=8):
        len(batch)

    for batch in DataLoader(Augmented(paths, TRAIN_TRANSFORMS), batch_size=8, num_workers=4):
        batch.sum()


if __name__ == "__main__":
    main(sys.argv[1:], [1, 2], [3, 4])
