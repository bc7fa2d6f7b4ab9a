"""A Hugging Face Trainer run (tiny BERT from a config, no download): ``hf_trainer.py torch`` over
a torch Dataset with a file list, ``hf_trainer.py datasets`` over a ``datasets.Dataset`` (which
has its own ``__getitems__``). accelerate imports torchdata's StatefulDataLoader when installed."""

from __future__ import annotations

import sys
import tempfile

import torch
from eco_plan import SAMPLES, Files, fault, record
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Tokens(Files):
    folder = "/data/tokens"

    def load(self, index: int) -> dict:
        return {"input_ids": torch.full((8,), index % 32), "labels": index % 2, "idx": index}


def hf_dataset():
    import datasets

    def transform(batch: dict) -> dict:
        for index in batch["idx"]:
            fault(index)
        return {
            "input_ids": [torch.full((8,), i % 32) for i in batch["idx"]],
            "labels": [i % 2 for i in batch["idx"]],
            "idx": batch["idx"],
        }

    return datasets.Dataset.from_dict({"idx": list(range(SAMPLES))}).with_transform(transform)


class Ledgered(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = BertConfig(
            vocab_size=32,
            hidden_size=8,
            num_hidden_layers=1,
            num_attention_heads=1,
            intermediate_size=8,
            max_position_embeddings=16,
            num_labels=2,
        )
        self.model = BertForSequenceClassification(config)

    def forward(self, input_ids, labels, idx):
        record(idx)
        return self.model(input_ids=input_ids, labels=labels)


def main() -> None:
    dataset = Tokens() if sys.argv[1] == "torch" else hf_dataset()
    with tempfile.TemporaryDirectory() as output:
        args = TrainingArguments(
            output_dir=output,
            per_device_train_batch_size=8,
            num_train_epochs=1,
            dataloader_num_workers=2,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            use_cpu=True,
            disable_tqdm=True,
            remove_unused_columns=False,
        )
        Trainer(model=Ledgered(), args=args, train_dataset=dataset).train()


if __name__ == "__main__":
    main()
