# expect: LD102 LD102
# ruff: noqa
from torch.utils.data import DataLoader, Dataset
from torchvision import datasets, transforms


class Captions(Dataset):
    def __init__(self, lines):
        self.lines = lines
        self.clean = lambda text: text.strip().lower()

    def __len__(self):
        return len(self.lines)

    def __getitem__(self, index):
        return self.clean(self.lines[index])


def main():
    captions = Captions(["A", "B"])
    images = datasets.ImageFolder(
        "data/train",
        transform=transforms.Compose(
            [transforms.ToTensor(), transforms.Lambda(lambda x: x.repeat(3, 1, 1))]
        ),
    )
    for loader in (
        DataLoader(captions, num_workers=2),
        DataLoader(images, batch_size=32, num_workers=4),
    ):
        for _ in loader:
            pass


if __name__ == "__main__":
    main()
