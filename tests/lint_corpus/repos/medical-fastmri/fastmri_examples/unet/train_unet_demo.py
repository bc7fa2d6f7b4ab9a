from fastmri.data.subsample import MaskFunc
from fastmri.data.transforms import UnetDataTransform
from fastmri.pl_modules.data_module import FastMriDataModule


def cli_main(args):
    mask = MaskFunc(args.center_fractions, args.accelerations)
    train_transform = UnetDataTransform(args.challenge, mask_func=mask, use_seed=False)
    data_module = FastMriDataModule(args.data_path, args.challenge, train_transform)
    for batch in data_module.train_dataloader():
        step(batch)


if __name__ == "__main__":
    cli_main(parse_args())
