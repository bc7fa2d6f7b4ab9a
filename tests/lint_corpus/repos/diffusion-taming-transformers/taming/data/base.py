import albumentations
import numpy as np
from PIL import Image
from torch.utils.data import Dataset


class ImagePaths(Dataset):
    def __init__(self, paths, size=None, random_crop=False):
        self.size = size
        self.labels = {"file_path_": paths}
        self._length = len(paths)
        if self.size is not None and self.size > 0:
            self.rescaler = albumentations.SmallestMaxSize(max_size=self.size)
            if not random_crop:
                self.cropper = albumentations.CenterCrop(height=self.size, width=self.size)
            else:
                self.cropper = albumentations.RandomCrop(height=self.size, width=self.size)
            self.preprocessor = albumentations.Compose([self.rescaler, self.cropper])
        else:
            self.preprocessor = lambda **kwargs: kwargs

    def __len__(self):
        return self._length

    def preprocess_image(self, image_path):
        image = np.array(Image.open(image_path).convert("RGB")).astype(np.uint8)
        image = self.preprocessor(image=image)["image"]  # want: LD108
        return (image / 127.5 - 1.0).astype(np.float32)

    def __getitem__(self, i):
        return {"image": self.preprocess_image(self.labels["file_path_"][i])}
