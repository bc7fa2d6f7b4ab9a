from torch.utils.data import DataLoader

from dataio.loader import get_dataset

json_opts = json_file_to_pyobj("configs/debug_ct.json")
model = get_model(json_opts.model)

dataset_class = get_dataset("test_sax")
dataset = dataset_class(json_opts.data_path, transform=None)
data_loader = DataLoader(dataset=dataset, num_workers=1, batch_size=1, shuffle=False)  # want: LD101

for iteration, (input_arr, input_meta, _) in enumerate(data_loader, 1):
    model.set_input(input_arr)
