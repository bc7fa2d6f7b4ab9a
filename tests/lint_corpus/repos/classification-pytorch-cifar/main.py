import torch
import torchvision
import torchvision.transforms as transforms

transform_train = transforms.Compose([transforms.RandomCrop(32, padding=4), transforms.ToTensor()])
trainset = torchvision.datasets.CIFAR10(root="./data", train=True, download=True, transform=transform_train)
trainloader = torch.utils.data.DataLoader(trainset, batch_size=128, shuffle=True, num_workers=2)


def train(epoch):
    for batch_idx, (inputs, targets) in enumerate(trainloader):
        step(inputs, targets)


for epoch in range(0, 200):
    train(epoch)  # want: LD101
