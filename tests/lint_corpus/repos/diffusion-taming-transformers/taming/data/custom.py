from torch.utils.data import Dataset

from taming.data.base import ImagePaths


class CustomBase(Dataset):
    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i]


class CustomTrain(CustomBase):
    def __init__(self, size, training_images_list_file):
        with open(training_images_list_file) as f:
            paths = f.read().splitlines()
        self.data = ImagePaths(paths=paths, size=size, random_crop=False)
