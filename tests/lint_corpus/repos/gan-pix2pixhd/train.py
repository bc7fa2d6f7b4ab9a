from data.data_loader import CreateDataLoader
from options.train_options import TrainOptions

opt = TrainOptions().parse()
data_loader = CreateDataLoader(opt)
dataset = data_loader.load_data()  # want: LD101
dataset_size = len(data_loader)

for epoch in range(1, opt.niter + 1):
    for i, data in enumerate(dataset):
        train_step(data)
