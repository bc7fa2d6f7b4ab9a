from torch.utils.data import DataLoader

from bert_pytorch.dataset.dataset import BERTDataset


def train(args):
    train_dataset = BERTDataset(args.train_dataset, None, seq_len=args.seq_len, on_memory=args.on_memory)
    train_data_loader = DataLoader(train_dataset, batch_size=args.batch_size, num_workers=args.num_workers)
    for data in train_data_loader:
        step(data)
