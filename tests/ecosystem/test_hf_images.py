"""Hugging Face ``datasets`` decoding an image column, under the drop-in loader: a truncated JPEG
is the sample's fault, named by its file and the Arrow shard that holds its row. The library's decode line, ``image.load()  # to avoid
"Too many open files" errors``, is quoted in the traceback and must not be read as the error."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
import torch

import loaderdoctor

pytestmark = [pytest.mark.slow, pytest.mark.ecosystem]
datasets = pytest.importorskip("datasets", reason="the eco extra installs datasets")


def test_a_truncated_jpeg_is_the_samples_fault_named_by_its_file_and_shard(tmp_path: Path) -> None:
    from PIL import Image

    noise = random.Random(0)
    paths = []
    for i in range(8):
        path = tmp_path / f"{i:02d}.jpg"
        Image.frombytes("RGB", (64, 64), noise.randbytes(64 * 64 * 3)).save(path, quality=95)
        paths.append(str(path))
    bad = Path(paths[5])
    bad.write_bytes(bad.read_bytes()[:-600])  # cut in its pixel data: load() fails, open() not
    images = datasets.Dataset.from_dict({"image": paths}).cast_column("image", datasets.Image())
    # Saved in two Arrow shards, as save_to_disk and load_dataset's cache keep rows (row 5 is in
    # the second); the images' bytes go with them, each named by its file's name alone.
    images.save_to_disk(str(tmp_path / "saved"), num_shards=2)
    saved = datasets.load_from_disk(str(tmp_path / "saved"))

    def mean(batch: dict[str, Any]) -> dict[str, Any]:
        return {"x": [torch.tensor(im.size) for im in batch["image"]]}

    expected = [
        (images, 0, str(bad), None),  # in memory, raised in this process
        (saved, 2, bad.name, str(tmp_path / "saved" / "data-00001-of-00002.arrow")),  # a worker
    ]
    for dataset, workers, file, shard in expected:
        loader = loaderdoctor.DataLoader(
            dataset.with_transform(mean), batch_size=2, num_workers=workers
        )
        with pytest.raises(OSError, match="image file is truncated") as caught:
            list(loader)
        diagnosis = caught.value.diagnosis  # type: ignore[attr-defined]
        assert (diagnosis.cause, diagnosis.indices, diagnosis.sample_file, diagnosis.shard) == (
            "sample-error",
            [5],
            file,
            shard,
        )
        assert not [line for line in diagnosis.evidence if "Too many open files" in line]
    assert os.path.exists(str(bad))
