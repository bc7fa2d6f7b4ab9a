import pickle

from torchtext.data import BucketIterator, Dataset, Field


def prepare_dataloaders(opt, device):
    batch_size = opt.batch_size
    data = pickle.load(open(opt.data_pkl, "rb"))
    fields = {"src": data["vocab"]["src"], "trg": data["vocab"]["trg"]}
    train = Dataset(examples=data["train"], fields=fields)  # deny: LD107
    train_iterator = BucketIterator(train, batch_size=batch_size, device=device, train=True)
    return train_iterator


def main():
    opt = parse_args()
    for batch in prepare_dataloaders(opt, "cuda"):
        step(batch)


if __name__ == "__main__":
    main()
