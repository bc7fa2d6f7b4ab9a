from data import ModelNet40
from torch.utils.data import DataLoader


def train(args, io):
    train_loader = DataLoader(
        ModelNet40(partition="train", num_points=args.num_points),
        num_workers=8, batch_size=args.batch_size, shuffle=True, drop_last=True,
    )
    for epoch in range(args.epochs):
        for data, label in train_loader:
            step(data, label)


if __name__ == "__main__":
    train(parse_args(), None)
