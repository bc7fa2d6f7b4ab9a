"""Hugging Face ``datasets`` decoding an image column, under the drop-in loader: a truncated JPEG
is the sample's fault, named by its file. The library's decode line, ``image.load()  # to avoid
"Too many open files" errors``, is quoted in the traceback and must not be read as the error."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
import torch

import loaderdoctor

pytestmark = pytest.mark.ecosystem
datasets = pytest.importorskip("datasets", reason="the eco extra installs datasets")


def test_a_truncated_jpeg_is_the_samples_fault_named_by_its_file(tmp_path: Path) -> None:
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

    def mean(batch: dict[str, Any]) -> dict[str, Any]:
        return {"x": [torch.tensor(im.size) for im in batch["image"]]}

    loader = loaderdoctor.DataLoader(images.with_transform(mean), batch_size=2)
    with pytest.raises(OSError, match="image file is truncated") as caught:
        list(loader)
    diagnosis = caught.value.diagnosis  # type: ignore[attr-defined]
    assert (diagnosis.cause, diagnosis.indices, diagnosis.sample_file) == (
        "sample-error",
        [5],
        str(bad),
    )
    assert not [line for line in diagnosis.evidence if "Too many open files" in line]
    assert os.path.exists(diagnosis.sample_file)
