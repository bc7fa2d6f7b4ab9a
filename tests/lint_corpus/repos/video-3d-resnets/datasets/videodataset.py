import json

import torch.utils.data as data


def get_database(data, subset, root_path, video_path_formatter):
    video_ids = []
    video_paths = []
    annotations = []
    for key, value in data["database"].items():
        if value["subset"] == subset:
            video_ids.append(key)
            annotations.append(value["annotations"])
            video_paths.append(video_path_formatter(root_path, value["annotations"]["label"], key))
    return video_ids, video_paths, annotations


class VideoDataset(data.Dataset):
    def __init__(self, root_path, annotation_path, subset, video_path_formatter=None):
        self.data, self.class_names = self.__make_dataset(  # want: LD107
            root_path, annotation_path, subset, video_path_formatter
        )

    def __make_dataset(self, root_path, annotation_path, subset, video_path_formatter):
        with annotation_path.open("r") as f:
            data = json.load(f)
        video_ids, video_paths, annotations = get_database(
            data, subset, root_path, video_path_formatter
        )
        idx_to_class = {}
        dataset = []
        for i in range(len(video_ids)):
            segment = annotations[i]["segment"]
            sample = {
                "video": video_paths[i],
                "segment": segment,
                "frame_indices": list(range(segment[0], segment[1])),
                "video_id": video_ids[i],
            }
            dataset.append(sample)
        return dataset, idx_to_class

    def __getitem__(self, index):
        return self.data[index]["video"], self.data[index]["frame_indices"]

    def __len__(self):
        return len(self.data)
