"""What every image source shares: ``SplitData`` (uint8 images ``[N, H, W, C]`` and int64
labels), the ``Source`` base class (a split loaded once, when first asked for, and checked:
labels in the class range, image sizes), and the conversions of arrays to those types."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from gcl_tf.errors import DataError

SPLITS = ("train", "test")


@dataclass
class SplitData:
    images: np.ndarray  # uint8 [N, H, W, C]
    labels: np.ndarray  # int64 [N]

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index) -> "SplitData":
        return SplitData(self.images[index], self.labels[index])


def _as_uint8_images(images: np.ndarray, where: str) -> np.ndarray:
    """Bring images to uint8 ``[N, H, W, C]``; floats in [0, 1] are scaled to [0, 255]."""
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4:
        raise DataError(f"{where}: expected images of shape [N, H, W] or [N, H, W, C], got {list(images.shape)}")
    if images.dtype == np.uint8:
        return images
    if np.issubdtype(images.dtype, np.floating):
        if not np.all(np.isfinite(images)):
            raise DataError(f"{where}: images contain NaN or infinite values")
        top = 1.0 if images.max(initial=0.0) <= 1.0 else 255.0
        return np.clip(np.round(images * (255.0 / top)), 0, 255).astype(np.uint8)
    if np.issubdtype(images.dtype, np.integer):
        if images.min(initial=0) < 0 or images.max(initial=0) > 255:
            raise DataError(f"{where}: integer images must lie in [0, 255]")
        return images.astype(np.uint8)
    raise DataError(f"{where}: unsupported image dtype {images.dtype}; allowed: uint8, integers, floats")


def _as_labels(labels: np.ndarray, count: int, where: str) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1 or len(labels) != count:
        raise DataError(f"{where}: expected {count} integer labels, got an array of shape {list(labels.shape)}")
    if not np.issubdtype(labels.dtype, np.integer):
        if np.issubdtype(labels.dtype, np.floating) and np.all(labels == np.round(labels)):
            labels = labels.astype(np.int64)
        else:
            raise DataError(f"{where}: labels must be integers, got dtype {labels.dtype}")
    return labels.astype(np.int64)


class Source:
    """Base class. Subclasses implement ``_load(split)`` and may know ``native_num_classes``."""

    name = "source"
    #: Whether reading it imports TensorFlow (TFDS, Keras's image reader); the others are read
    #: before TensorFlow loads, so that their mistakes are reported at once (gcl_tf/prechecks.py).
    uses_tensorflow = False

    def __init__(self, config):
        self.config = config
        self._cache: dict[str, SplitData] = {}

    # Subclasses ------------------------------------------------------------------------------
    def _load(self, split: str) -> SplitData:
        raise NotImplementedError

    def native_num_classes(self) -> Optional[int]:
        return None

    def class_names(self) -> Optional[list]:
        """The name of each class id, when the source knows them (else None)."""
        return None

    # Public ----------------------------------------------------------------------------------
    def load(self, split: str) -> SplitData:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}")
        if split not in self._cache:
            data = self._load(split)
            self._check(data, split)
            self._cache[split] = data
        return self._cache[split]

    @property
    def num_classes(self) -> int:
        if self.config.num_classes is not None:
            return self.config.num_classes
        native = self.native_num_classes()
        if native is not None:
            return native
        return int(self.load("train").labels.max()) + 1

    def _label_rule(self, low: int, high: int, expected, split: str) -> str:
        """What is wrong with labels ``low..high`` against ``expected`` classes, and what is allowed."""
        if low < 0:
            return f": {low} is negative; allowed: labels 0 and up"
        if self.config.num_classes is not None:
            return (f" 0..{expected - 1} that benchmark.num_classes {expected} sets; allowed: benchmark.num_classes "
                    f"{high + 1} or more, or null (inferred from the labels)")
        whose = "the source's" if self.native_num_classes() is not None else "the training labels'"
        return f" 0..{expected - 1} ({whose} {expected} classes); allowed: {split} labels 0..{expected - 1}"

    def _check(self, data: SplitData, split: str) -> None:
        where = f"{self.describe()} ({split})"
        if len(data) == 0:
            raise DataError(f"{where}: the split is empty")
        expected = self.config.num_classes or self.native_num_classes()
        if expected is None and split == "test":  # classes inferred from the training labels
            expected = int(self.load("train").labels.max()) + 1
        low, high = int(data.labels.min()), int(data.labels.max())
        if low < 0 or (expected is not None and high >= expected):
            raise DataError(f"{where}: labels {low}..{high} fall outside the class range" + self._label_rule(
                low, high, expected, split))
        size = self.config.image_size
        if size is not None and self.name != "folder":
            h, w = data.images.shape[1:3]
            if (h, w) != (size, size):
                raise DataError(
                    f"{where}: images are {h}x{w} but benchmark.image_size is {size}; "
                    f"set benchmark.image_size to {h} or null"
                )
        if split == "test" and "train" in self._cache:
            train_shape = self._cache["train"].images.shape[1:]
            if data.images.shape[1:] != train_shape:
                raise DataError(
                    f"{where}: test images have shape {list(data.images.shape[1:])} "
                    f"but training images {list(train_shape)}"
                )

    def describe(self) -> str:
        return f"{self.name} source {self.config.path or self.config.dataset!r}"
