from torch.utils import data
from torchvision import transforms

from dataset import MultiResolutionDataset

if __name__ == "__main__":
    args = parse_args()
    transform = transforms.Compose([transforms.RandomHorizontalFlip(), transforms.ToTensor()])
    dataset = MultiResolutionDataset(args.path, transform, args.size)
    loader = data.DataLoader(dataset, batch_size=args.batch, drop_last=True, num_workers=4)
    for batch in loader:
        step(batch)
