import torch.utils.data as data

from data.coco import COCODetection
from data.voc0712 import VOCDetection
from utils.augmentations import SSDAugmentation


def train(args):
    if args.dataset == "COCO":
        dataset = COCODetection(root=args.dataset_root, transform=SSDAugmentation(300))
    elif args.dataset == "VOC":
        dataset = VOCDetection(root=args.dataset_root, transform=SSDAugmentation(300))
    data_loader = data.DataLoader(dataset, args.batch_size, num_workers=args.num_workers, shuffle=True)
    for images, targets in data_loader:
        step(images, targets)


if __name__ == "__main__":
    train(parse_args())
