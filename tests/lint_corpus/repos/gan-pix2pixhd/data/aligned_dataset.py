import os

import torch.utils.data as data
from PIL import Image


class AlignedDataset(data.Dataset):
    def initialize(self, opt):
        self.dir_A = os.path.join(opt.dataroot, opt.phase + "_label")
        self.A_paths = sorted(os.listdir(self.dir_A))

    def __getitem__(self, index):
        return Image.open(os.path.join(self.dir_A, self.A_paths[index]))

    def __len__(self):
        return len(self.A_paths)
