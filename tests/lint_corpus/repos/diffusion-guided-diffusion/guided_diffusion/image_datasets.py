import os

import blobfile as bf
from PIL import Image
from torch.utils.data import DataLoader, Dataset


def load_data(*, data_dir, batch_size, image_size, class_cond=False, deterministic=False):
    all_files = _list_image_files_recursively(data_dir)
    classes = None
    if class_cond:
        class_names = [bf.basename(path).split("_")[0] for path in all_files]
        sorted_classes = {x: i for i, x in enumerate(sorted(set(class_names)))}
        classes = [sorted_classes[x] for x in class_names]
    dataset = ImageDataset(image_size, all_files, classes=classes)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=not deterministic, num_workers=1)
    while True:
        yield from loader


def _list_image_files_recursively(data_dir):
    results = []
    for entry in sorted(bf.listdir(data_dir)):
        results.append(bf.join(data_dir, entry))
    return results


class ImageDataset(Dataset):
    def __init__(self, resolution, image_paths, classes=None, shard=0, num_shards=1):
        super().__init__()
        self.resolution = resolution
        self.local_images = image_paths[shard:][::num_shards]
        self.local_classes = None if classes is None else classes[shard:][::num_shards]  # deny: LD107

    def __len__(self):
        return len(self.local_images)

    def __getitem__(self, idx):
        with bf.BlobFile(self.local_images[idx], "rb") as f:
            pil_image = Image.open(f)
            pil_image.load()
        out_dict = {}
        if self.local_classes is not None:
            out_dict["y"] = self.local_classes[idx]
        return pil_image, out_dict
