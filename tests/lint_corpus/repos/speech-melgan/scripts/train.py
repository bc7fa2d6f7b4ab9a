from torch.utils.data import DataLoader

from mel2wav.dataset import AudioDataset


def main(args):
    train_set = AudioDataset(args.data_path / "train_files.txt", args.seq_len, sampling_rate=22050)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, num_workers=4)
    for epoch in range(1, args.epochs + 1):
        for x_t in train_loader:
            step(x_t)


if __name__ == "__main__":
    main(parse_args())
