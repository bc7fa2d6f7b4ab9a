import random

from torch.utils.data import Dataset


class BERTDataset(Dataset):
    def __init__(self, corpus_path, vocab, seq_len, encoding="utf-8", corpus_lines=None, on_memory=True):
        self.vocab = vocab
        self.seq_len = seq_len
        self.on_memory = on_memory
        self.corpus_lines = corpus_lines
        self.corpus_path = corpus_path
        self.encoding = encoding
        with open(corpus_path, "r", encoding=encoding) as f:
            if on_memory:
                self.lines = [line[:-1].split("\t") for line in f]
                self.corpus_lines = len(self.lines)
        if not on_memory:
            self.file = open(corpus_path, "r", encoding=encoding)  # want: LD106
            self.random_file = open(corpus_path, "r", encoding=encoding)  # want: LD106
            for _ in range(random.randint(0, 1000)):
                self.random_file.__next__()

    def __len__(self):
        return self.corpus_lines

    def __getitem__(self, item):
        t1, t2 = self.get_corpus_line(item)
        if random.random() > 0.5:
            t2 = self.get_random_line()
        return t1, t2

    def get_corpus_line(self, item):
        if self.on_memory:
            return self.lines[item][0], self.lines[item][1]
        line = self.file.__next__()
        if line is None:
            self.file.close()
            self.file = open(self.corpus_path, "r", encoding=self.encoding)
            line = self.file.__next__()
        t1, t2 = line[:-1].split("\t")
        return t1, t2

    def get_random_line(self):
        if self.on_memory:
            return self.lines[random.randrange(len(self.lines))][1]
        line = self.random_file.__next__()
        return line[:-1].split("\t")[1]
