import json

import torch
from PIL import Image


class BaseDataset(torch.utils.data.Dataset):
    def __init__(self, odgt, opt, **kwargs):
        self.imgSizes = opt.imgSizes
        self.parse_input_list(odgt, **kwargs)

    def parse_input_list(self, odgt, max_sample=-1):
        if isinstance(odgt, list):
            self.list_sample = odgt
        elif isinstance(odgt, str):
            self.list_sample = [json.loads(x.rstrip()) for x in open(odgt, "r")]  # want: LD107
        if max_sample > 0:
            self.list_sample = self.list_sample[0:max_sample]
        self.num_sample = len(self.list_sample)


class TrainDataset(BaseDataset):
    def __init__(self, root_dataset, odgt, opt, **kwargs):
        super().__init__(odgt, opt, **kwargs)
        self.root_dataset = root_dataset

    def __getitem__(self, index):
        this_record = self.list_sample[index]
        return Image.open(f"{self.root_dataset}/{this_record['fpath_img']}")

    def __len__(self):
        return self.num_sample
