import json

import torch.utils.data as data


class ActivityNet(data.Dataset):
    def __init__(self, root_path, annotation_path, subset):
        self.data, self.class_names = self.__make_dataset(root_path, annotation_path, subset)  # want: LD107

    def __make_dataset(self, root_path, annotation_path, subset):
        with annotation_path.open("r") as f:
            data = json.load(f)
        dataset = []
        for key, value in data["database"].items():
            if value["subset"] != subset:
                continue
            for annotation in value["annotations"]:
                sample = {"video": root_path / key, "segment": annotation["segment"]}
                dataset.append(sample)
        return dataset, {}

    def __getitem__(self, index):
        return self.data[index]["video"]

    def __len__(self):
        return len(self.data)
