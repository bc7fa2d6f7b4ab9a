import pandas as pd
from PIL import Image
from torch.utils.data import DataLoader, Dataset


class CsvDataset(Dataset):
    def __init__(self, input_filename, transforms, img_key, caption_key, sep="\t", tokenizer=None):
        df = pd.read_csv(input_filename, sep=sep)
        # Kept as pandas Series, not Python lists: a list of strings is copied page by page
        # into forked workers as the cyclic GC walks it.
        self.images = df[img_key]  # deny: LD107
        self.captions = df[caption_key]  # deny: LD107
        self.transforms = transforms
        self.tokenize = tokenizer

    def __len__(self):
        return len(self.captions)

    def __getitem__(self, idx):
        images = self.transforms(Image.open(str(self.images.iloc[idx])))
        texts = self.tokenize([str(self.captions.iloc[idx])])[0]
        return images, texts


def get_csv_dataset(args, preprocess_fn, is_train, tokenizer=None):
    dataset = CsvDataset(args.train_data, preprocess_fn, img_key=args.csv_img_key,
                         caption_key=args.csv_caption_key, tokenizer=tokenizer)
    return DataLoader(dataset, batch_size=args.batch_size, shuffle=is_train, num_workers=args.workers)
