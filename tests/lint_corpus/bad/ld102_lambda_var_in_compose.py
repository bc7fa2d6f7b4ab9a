# expect: LD102
# ruff: noqa
# A Lambda transform kept in a variable, then placed in a Compose list (issue 26 item 1).
import torch
from torchvision import datasets, transforms


def main():
    to_gray = transforms.Lambda(lambda x: x.mean(0, keepdim=True))
    tf = transforms.Compose([transforms.ToTensor(), to_gray])
    data = datasets.MNIST("data", train=True, transform=tf)
    loader = torch.utils.data.DataLoader(data, batch_size=64, num_workers=4)
    for batch in loader:
        pass


if __name__ == "__main__":
    main()
