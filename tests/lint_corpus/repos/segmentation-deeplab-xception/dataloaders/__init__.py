from torch.utils.data import DataLoader

from dataloaders.datasets import coco, pascal


def make_data_loader(args, **kwargs):
    if args.dataset == "pascal":
        train_set = pascal.VOCSegmentation(args, split="train")
        train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, **kwargs)
        return train_loader
    elif args.dataset == "coco":
        train_set = coco.COCOSegmentation(args, split="train")
        train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, **kwargs)
        return train_loader
    else:
        raise NotImplementedError
