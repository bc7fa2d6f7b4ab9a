# expect:
# ruff: noqa
"""Fine-tune a ResNet on a folder of images: one folder per class, like ImageFolder."""

import argparse
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import models, transforms

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}


class FolderDataset(Dataset):
    """Paths and labels live in numpy arrays, so workers do not copy them on read."""

    def __init__(self, root, transform=None):
        root = Path(root)
        self.classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        class_to_index = {name: index for index, name in enumerate(self.classes)}
        paths = sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        self.paths = np.array([str(p) for p in paths], dtype=np.str_)
        self.labels = np.array([class_to_index[p.parent.name] for p in paths], dtype=np.int64)
        self.transform = transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        with Image.open(self.paths[index]) as image:
            image = image.convert("RGB")
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.labels[index])


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="data/train")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    return parser.parse_args()


def main():
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_tf = transforms.Compose(
        [
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    dataset = FolderDataset(args.data, transform=train_tf)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
        pin_memory=True,
        persistent_workers=args.num_workers > 0,
        prefetch_factor=4,
        drop_last=True,
    )
    model = models.resnet18(num_classes=len(dataset.classes)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        model.train()
        for step, (images, labels) in enumerate(loader):
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
        torch.save(model.state_dict(), f"checkpoint_{epoch}.pt")


if __name__ == "__main__":
    main()
