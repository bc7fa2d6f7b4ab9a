import torch

from fastmri.data.mri_data import SliceDataset


def run_inference(challenge, data_path):
    dataset = SliceDataset(root=data_path, challenge=challenge, transform=None)
    dataloader = torch.utils.data.DataLoader(dataset, num_workers=4)  # want: LD102
    for batch in dataloader:
        step(batch)


if __name__ == "__main__":
    run_inference("multicoil", "data")
