# expect: LD102 LD102
# ruff: noqa
# A Compose holding a Lambda, built by a transform factory and handed to the Dataset.
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms
from torchvision.datasets import ImageFolder


def get_transform(size):
    augs = [transforms.Resize(size), transforms.Lambda(lambda img: img.convert("RGB"))]
    return transforms.Compose(augs)


def get_plain_transform(size):
    return transforms.Compose([transforms.Resize(size), transforms.ToTensor()])


class Folder(Dataset):
    def __init__(self, root, transform):
        self.root = root
        self.transform = transform

    def __getitem__(self, index):
        return self.transform(index)

    def __len__(self):
        return 8


def main(root):
    train = ImageFolder(root, transform=get_transform(256))
    val = Folder(root, get_transform(224))
    plain = Folder(root, get_plain_transform(224))
    for loader in (DataLoader(train, num_workers=4), DataLoader(val, num_workers=4), DataLoader(plain, num_workers=4)):
        for batch in loader:
            pass


if __name__ == "__main__":
    main("data")
