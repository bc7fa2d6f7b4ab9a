import os

import torch.utils.data as data
from PIL import Image


class VideoRecord(object):
    def __init__(self, row):
        self._data = row

    @property
    def path(self):
        return self._data[0]


class TSNDataSet(data.Dataset):
    def __init__(self, root_path, list_file, num_segments=3, transform=None):
        self.root_path = root_path
        self.list_file = list_file
        self.num_segments = num_segments
        self.transform = transform
        self._parse_list()

    def _parse_list(self):
        tmp = [x.strip().split(" ") for x in open(self.list_file)]
        self.video_list = [VideoRecord(item) for item in tmp]

    def __getitem__(self, index):
        record = self.video_list[index]
        return Image.open(os.path.join(self.root_path, record.path, "img_00001.jpg"))

    def __len__(self):
        return len(self.video_list)
