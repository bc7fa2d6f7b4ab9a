from open_clip_train.data import get_csv_dataset


def main(args):
    for images, texts in get_csv_dataset(args, None, True):
        step(images, texts)


if __name__ == "__main__":
    main(parse_args())
