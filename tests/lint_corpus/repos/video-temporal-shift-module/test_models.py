import torch

from ops.dataset import TSNDataSet

args = parse_args()
weights_list = args.weights.split(",")
test_file_list = args.test_list.split(",")

for this_weights, test_file in zip(weights_list, test_file_list):
    data_loader = torch.utils.data.DataLoader(  # want: LD101
        TSNDataSet(args.root_path, test_file, num_segments=8),
        batch_size=args.batch_size,
        shuffle=False,
        num_workers=args.workers,
        pin_memory=True,
    )
    for i, (data, label) in enumerate(data_loader):
        evaluate(this_weights, data, label)
