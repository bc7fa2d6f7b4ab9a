from torch.utils.data import DataLoader

import datasets

if __name__ == "__main__":
    args = parse_args()
    gpuargs = {"num_workers": args.effective_number_workers, "pin_memory": True, "drop_last": True}
    train_dataset = datasets.MpiSintel(args, True, root=args.training_dataset_root)
    train_loader = DataLoader(train_dataset, batch_size=args.effective_batch_size, shuffle=True, **gpuargs)
    for data, target in train_loader:
        step(data, target)
