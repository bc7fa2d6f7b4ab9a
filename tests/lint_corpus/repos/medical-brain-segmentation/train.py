import numpy as np
from torch.utils.data import DataLoader

from dataset import BrainSegmentationDataset


def data_loaders(args):
    dataset_train = BrainSegmentationDataset(args.images, subset="train")

    def worker_init(worker_id):
        np.random.seed(42 + worker_id)  # want: LD110

    loader_train = DataLoader(
        dataset_train,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        worker_init_fn=worker_init,  # want: LD102
    )
    return loader_train


def main(args):
    for batch in data_loaders(args):
        step(batch)


if __name__ == "__main__":
    main(parse_args())
