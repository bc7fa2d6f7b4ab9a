import random

import torch
import torchvision
import torchvision.transforms as transforms
from PIL import ImageFilter


def main():
    args = parse_args()
    torch.multiprocessing.spawn(main_worker, (args,), args.ngpus_per_node)


def main_worker(gpu, args):
    dataset = torchvision.datasets.ImageFolder(args.data / "train", Transform())
    sampler = torch.utils.data.distributed.DistributedSampler(dataset)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, num_workers=args.workers, pin_memory=True, sampler=sampler
    )
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for (y1, y2), _ in loader:
            step(y1, y2)


class GaussianBlur(object):
    def __init__(self, p):
        self.p = p

    def __call__(self, img):
        if random.random() < self.p:  # deny: LD109
            return img.filter(ImageFilter.GaussianBlur(radius=random.random() * 1.9 + 0.1))
        return img


class Transform:
    def __init__(self):
        self.transform = transforms.Compose([transforms.RandomResizedCrop(224), GaussianBlur(p=1.0)])
        self.transform_prime = transforms.Compose([transforms.RandomResizedCrop(224), GaussianBlur(p=0.1)])

    def __call__(self, x):
        return self.transform(x), self.transform_prime(x)


if __name__ == "__main__":
    main()
