import torch
from torch.utils.data.sampler import Sampler


def _compute_aspect_ratios_slow(dataset, indices=None):
    if indices is None:
        indices = range(len(dataset))

    class SubsetSampler(Sampler):
        def __init__(self, indices):
            self.indices = indices

        def __iter__(self):
            return iter(self.indices)

        def __len__(self):
            return len(self.indices)

    sampler = SubsetSampler(indices)
    data_loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=1,
        sampler=sampler,  # want: LD102
        num_workers=14,
        collate_fn=lambda x: x[0],  # want: LD102
    )
    aspect_ratios = []
    for img, _ in data_loader:
        height, width = img.shape[-2:]
        aspect_ratios.append(float(width) / float(height))
    return aspect_ratios
