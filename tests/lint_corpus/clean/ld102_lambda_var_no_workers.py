# expect:
# ruff: noqa
# The twin of bad/ld102_lambda_var_in_compose.py with num_workers=0: nothing is pickled.
import torch
from torchvision import datasets, transforms


def main():
    to_gray = transforms.Lambda(lambda x: x.mean(0, keepdim=True))
    tf = transforms.Compose([transforms.ToTensor(), to_gray])
    data = datasets.MNIST("data", train=True, transform=tf)
    loader = torch.utils.data.DataLoader(data, batch_size=64, num_workers=0)
    for batch in loader:
        pass


if __name__ == "__main__":
    main()
