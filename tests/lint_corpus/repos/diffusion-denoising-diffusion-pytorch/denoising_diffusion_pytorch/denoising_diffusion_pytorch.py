from functools import partial
from multiprocessing import cpu_count
from pathlib import Path

from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T


def exists(x):
    return x is not None


def convert_image_to_fn(img_type, image):
    return image.convert(img_type) if image.mode != img_type else image


def cycle(dl):
    while True:
        for data in dl:
            yield data


class Dataset(Dataset):
    def __init__(self, folder, image_size, exts=("jpg", "png"), convert_image_to=None):
        super().__init__()
        self.paths = [p for ext in exts for p in Path(folder).glob(f"**/*.{ext}")]
        maybe_convert_fn = (
            partial(convert_image_to_fn, convert_image_to) if exists(convert_image_to) else nn.Identity()
        )
        self.transform = T.Compose(
            [
                T.Lambda(maybe_convert_fn),  # deny: LD102
                T.Resize(image_size),
                T.ToTensor(),
            ]
        )

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        return self.transform(Image.open(self.paths[index]))


class Trainer:
    def __init__(self, folder, train_batch_size=16, image_size=128):
        self.ds = Dataset(folder, image_size)
        dl = DataLoader(self.ds, batch_size=train_batch_size, shuffle=True, pin_memory=True, num_workers=cpu_count())
        self.dl = cycle(dl)

    def train(self, steps):
        for _ in range(steps):
            step(next(self.dl))
