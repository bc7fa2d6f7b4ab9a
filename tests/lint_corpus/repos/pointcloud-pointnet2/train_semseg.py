import time

import numpy as np
import torch

from data_utils.S3DISDataLoader import S3DISDataset


def main(args):
    TRAIN_DATASET = S3DISDataset(split="train", data_root=args.root, num_point=args.npoint)
    trainDataLoader = torch.utils.data.DataLoader(
        TRAIN_DATASET,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=10,
        pin_memory=True,
        drop_last=True,
        worker_init_fn=lambda x: np.random.seed(x + int(time.time())),  # want: LD102
    )
    for points, target in trainDataLoader:
        step(points, target)


if __name__ == "__main__":
    main(parse_args())
