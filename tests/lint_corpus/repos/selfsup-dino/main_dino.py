import random

import torch
from torchvision import datasets, transforms


class GaussianBlur(object):
    def __init__(self, p=0.5):
        self.prob = p

    def __call__(self, img):
        if random.random() > self.prob:
            return img
        return img


class DataAugmentationDINO(object):
    def __init__(self, global_crops_scale):
        self.global_transfo1 = transforms.Compose(
            [transforms.RandomResizedCrop(224, scale=global_crops_scale), GaussianBlur(1.0)]
        )

    def __call__(self, image):
        return [self.global_transfo1(image)]


def train_dino(args):
    transform = DataAugmentationDINO(args.global_crops_scale)
    dataset = datasets.ImageFolder(args.data_path, transform=transform)  # deny: LD102
    data_loader = torch.utils.data.DataLoader(dataset, num_workers=args.num_workers, drop_last=True)
    for images, _ in data_loader:
        step(images)


if __name__ == "__main__":
    train_dino(parse_args())
