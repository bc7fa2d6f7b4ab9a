from torch.utils.data import DataLoader

from datasets.coco import build


def main(args):
    dataset_train = build(image_set="train", args=args)
    data_loader_train = DataLoader(dataset_train, batch_size=2, num_workers=args.num_workers)
    for samples, targets in data_loader_train:
        step(samples, targets)


if __name__ == "__main__":
    main(parse_args())
