from guided_diffusion.image_datasets import load_data


def main(args):
    data = load_data(data_dir=args.data_dir, batch_size=args.batch_size, image_size=args.image_size)
    for batch, cond in data:
        step(batch, cond)


if __name__ == "__main__":
    main(parse_args())
