import os
from pathlib import Path

from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

IMAGE_EXTS = [".jpg", ".png", ".jpeg"]


def expand_greyscale(t):
    return t.expand(3, -1, -1)


class ImagesDataset(Dataset):
    def __init__(self, folder, image_size):
        super().__init__()
        self.paths = []
        for path in Path(f"{folder}").glob("**/*"):
            _, ext = os.path.splitext(path)
            if ext.lower() in IMAGE_EXTS:
                self.paths.append(path)
        self.transform = transforms.Compose(
            [
                transforms.Resize(image_size),
                transforms.ToTensor(),
                transforms.Lambda(expand_greyscale),  # deny: LD102
            ]
        )

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        return self.transform(Image.open(self.paths[index]).convert("RGB"))


if __name__ == "__main__":
    ds = ImagesDataset("images", 256)
    train_loader = DataLoader(ds, batch_size=32, num_workers=os.cpu_count(), shuffle=True)
    for batch in train_loader:
        step(batch)
