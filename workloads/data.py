"""Input data for the workloads: synthetic batches (deterministic per seed, rank and step) or an image folder.

Synthetic images are learnable on purpose: each class has a fixed random prototype (same on every rank,
from ``seed``) and an image is its class prototype plus noise (per ``seed, rank, step``), so the loss of a
correct training loop goes down within a few dozen steps.
"""

from __future__ import annotations

import pathlib

import numpy as np

from perfbench.errors import ConfigError


class SyntheticImages:
    """``batch(step) -> (images float32 [B,3,H,W], labels int32 [B])``, deterministic per (seed, rank, step)."""

    def __init__(self, batch_size: int, image_size: int, num_classes: int, seed: int, rank: int, noise: float = 0.5):
        self.batch_size = int(batch_size)
        self.image_size = int(image_size)
        self.num_classes = int(num_classes)
        self.seed = int(seed)
        self.rank = int(rank)
        self.noise = float(noise)
        proto_rng = np.random.default_rng([self.seed, 0xC1A55])
        self.prototypes = proto_rng.standard_normal((self.num_classes, 3, self.image_size, self.image_size)).astype(
            np.float32
        )

    def batch(self, step: int):
        rng = np.random.default_rng([self.seed, self.rank + 1, int(step)])
        labels = rng.integers(0, self.num_classes, size=self.batch_size).astype(np.int32)
        noise = rng.standard_normal((self.batch_size, 3, self.image_size, self.image_size)).astype(np.float32)
        images = self.prototypes[labels] + self.noise * noise
        return images, labels


class ImageFolder:
    """``mindspore.dataset.ImageFolderDataset`` sharded by rank; ``batch(step)`` cycles through the epoch."""

    def __init__(
        self, root: str, batch_size: int, image_size: int, num_classes: int, seed: int, rank: int, world_size: int
    ):
        import mindspore as ms
        import mindspore.dataset as ds
        import mindspore.dataset.vision as vision

        path = pathlib.Path(root)
        if not path.is_dir():
            raise ConfigError(f"train.data: image folder {root!r} does not exist or is not a directory")
        classes = sorted(d.name for d in path.iterdir() if d.is_dir())
        if not classes:
            raise ConfigError(f"train.data: image folder {root!r} has no class sub-folders")
        if len(classes) > num_classes:
            raise ConfigError(
                f"train.data: image folder {root!r} has {len(classes)} classes but model.num_classes is {num_classes}"
            )
        ds.config.set_seed(int(seed))
        kw = dict(shuffle=True, decode=True)
        if world_size > 1:
            kw.update(num_shards=world_size, shard_id=rank)
        data = ds.ImageFolderDataset(str(path), **kw)
        data = data.map(
            [
                vision.Resize((image_size, image_size)),
                vision.Rescale(1.0 / 255.0, 0.0),
                vision.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]),
                vision.HWC2CHW(),
            ],
            input_columns="image",
        )
        data = data.map(lambda y: np.asarray(y, np.int32), input_columns="label")
        data = data.batch(int(batch_size), drop_remainder=True)
        if data.get_dataset_size() == 0:
            raise ConfigError(
                f"train.data: image folder {root!r} has fewer than batch_size={batch_size} images for rank {rank}"
            )
        self._data = data.repeat()
        self._it = self._data.create_tuple_iterator(output_numpy=True)
        self._ms = ms

    def batch(self, step: int):
        images, labels = next(self._it)
        return images.astype(np.float32), labels.astype(np.int32)


def make_image_data(train: dict, model: dict, rank: int, world_size: int):
    src = train.get("data", "synthetic")
    if src in (None, "synthetic"):
        return SyntheticImages(train["batch_size"], model["image_size"], model["num_classes"], train["seed"], rank)
    if isinstance(src, dict):
        src = src.get("image_folder")
    if isinstance(src, str) and src.startswith("imagefolder:"):
        src = src[len("imagefolder:") :]
    if not isinstance(src, str):
        raise ConfigError(f"train.data must be 'synthetic' or an image folder path, got {train.get('data')!r}")
    return ImageFolder(
        src, train["batch_size"], model["image_size"], model["num_classes"], train["seed"], rank, world_size
    )
