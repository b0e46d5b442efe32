"""Image sources: each returns whole splits as uint8 arrays ``[N, H, W, C]`` with int64 labels.

- ``tfds``: TensorFlow Datasets (mnist, fashion_mnist, cifar10, cifar100, svhn_cropped, ...).
- ``idx``: a folder of MNIST-format files (``train-images-idx3-ubyte[.gz]`` ...), such as Debian's
  ``dataset-fashion-mnist`` in ``/usr/share/datasets/fashion-mnist``.
- ``npz``: a Keras-style ``.npz`` with ``x_train, y_train, x_test, y_test``.
- ``folder``: ``train/<class>/*.png|jpg`` and ``test/<class>/*`` (classes in sorted name order).
- ``digits``: scikit-learn's bundled 8x8 digits (1,797 images; a fixed stratified 75/25 split).

A split is loaded only when asked for: a run that evaluates on validation data never reads the
test split.
"""
from __future__ import annotations

import gzip
import os
import struct
from dataclasses import dataclass
from typing import Optional

import numpy as np

from gcl_tf.errors import DataError

SPLITS = ("train", "test")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")


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

    def _check(self, data: SplitData, split: str) -> None:
        where = f"{self.describe()} ({split})"
        if len(data) == 0:
            raise DataError(f"{where}: the split is empty")
        expected = self.config.num_classes or self.native_num_classes()
        if expected is None and split == "test":  # classes inferred from the training labels
            expected = int(self.load("train").labels.max()) + 1
        low, high = int(data.labels.min()), int(data.labels.max())
        if low < 0 or (expected is not None and high >= expected):
            allowed = f"0..{expected - 1}" if expected is not None else "non-negative"
            raise DataError(f"{where}: labels outside the class range ({low}..{high}); allowed: {allowed}")
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


# ----------------------------------------------------------------------------------- digits
class DigitsSource(Source):
    name = "digits"

    def native_num_classes(self):
        return 10

    def class_names(self):
        return [str(d) for d in range(10)]

    def _load(self, split):
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        digits = load_digits()
        images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]  # [1797, 8, 8, 1]
        labels = digits.target.astype(np.int64)
        index = np.arange(len(labels))
        train_index, test_index = train_test_split(index, test_size=0.25, random_state=0, stratify=labels)
        chosen = np.sort(train_index if split == "train" else test_index)
        return SplitData(images[chosen], labels[chosen])

    def describe(self):
        return "digits source (scikit-learn)"


# -------------------------------------------------------------------------------------- idx
_IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def read_idx(path: str) -> np.ndarray:
    """Read one IDX file (optionally gzipped) of unsigned bytes; clear errors on corruption."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            raw = handle.read()
    except (OSError, EOFError) as error:
        raise DataError(f"{path}: cannot read ({error.__class__.__name__}: {error}); "
                        "the file may be truncated") from None
    if len(raw) < 4:
        raise DataError(f"{path}: truncated IDX file ({len(raw)} bytes)")
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08 or ndim not in (1, 3):
        raise DataError(
            f"{path}: bad IDX magic number 0x{int.from_bytes(raw[:4], 'big'):08x}; "
            "allowed: 0x00000801 (labels) or 0x00000803 (images)"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header")
    dims = struct.unpack(">" + "I" * ndim, raw[4:header])
    expected = int(np.prod(dims))
    if len(raw) - header != expected:
        raise DataError(
            f"{path}: truncated or oversized IDX data: {len(raw) - header} bytes for shape {list(dims)} "
            f"({expected} expected)"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


class IdxSource(Source):
    name = "idx"

    def _find(self, stem):
        for candidate in (stem, stem + ".gz"):
            path = os.path.join(self.config.path, candidate)
            if os.path.isfile(path):
                return path
        raise DataError(f"benchmark.path: {self.config.path!r} has no {stem}[.gz] (an MNIST-format IDX folder)")

    def _load(self, split):
        if not os.path.isdir(self.config.path):
            raise DataError(f"benchmark.path: folder {self.config.path!r} does not exist")
        image_stem, label_stem = _IDX_FILES[split]
        image_path, label_path = self._find(image_stem), self._find(label_stem)
        images = read_idx(image_path)
        labels = read_idx(label_path)
        if images.ndim != 3:
            raise DataError(f"{image_path}: expected a 3-dimensional image file, got {images.ndim} dimensions")
        if labels.ndim != 1:
            raise DataError(f"{label_path}: expected a 1-dimensional label file, got {labels.ndim} dimensions")
        if len(images) != len(labels):
            raise DataError(f"{image_path}: {len(images)} images but {len(labels)} labels in {label_path}")
        return SplitData(images[..., None].copy(), labels.astype(np.int64))


# -------------------------------------------------------------------------------------- npz
class NpzSource(Source):
    name = "npz"

    def _load(self, split):
        path = self.config.path
        if not os.path.isfile(path):
            raise DataError(f"benchmark.path: file {path!r} does not exist")
        try:
            with np.load(path, allow_pickle=False) as archive:
                keys = set(archive.files)
                x_key, y_key = f"x_{split}", f"y_{split}"
                if x_key not in keys or y_key not in keys:
                    raise DataError(f"{path}: missing {x_key}/{y_key}; a .npz needs x_train, y_train, x_test, y_test")
                images, labels = archive[x_key], archive[y_key]
        except DataError:
            raise
        except Exception as error:  # zipfile.BadZipFile, ValueError, ...
            raise DataError(f"{path}: not a readable .npz file ({error.__class__.__name__})") from None
        images = _as_uint8_images(images, f"{path} {x_key}")
        return SplitData(images, _as_labels(labels, len(images), f"{path} {y_key}"))


# ----------------------------------------------------------------------------------- folder
class FolderSource(Source):
    name = "folder"

    def _class_dirs(self, split):
        root = os.path.join(self.config.path, split)
        if not os.path.isdir(root):
            raise DataError(f"benchmark.path: {root!r} does not exist; "
                            "a folder source needs train/<class>/ and test/<class>/")
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        if not classes:
            raise DataError(f"benchmark.path: {root!r} has no class folders")
        for name in classes:
            files = [f for f in os.listdir(os.path.join(root, name)) if f.lower().endswith(IMAGE_EXTENSIONS)]
            if not files:
                raise DataError(
                    f"benchmark.path: class folder {os.path.join(root, name)!r} is empty; "
                    f"every class needs images ({', '.join(IMAGE_EXTENSIONS)})"
                )
        return root, classes

    def native_num_classes(self):
        return len(self._class_dirs("train")[1])

    def class_names(self):
        return list(self._class_dirs("train")[1])

    def _check_native_sizes(self, root, classes, size) -> None:
        """Without benchmark.image_size every image keeps its native size, which must be the
        training images' one: every image is checked (a header read each, no decoding), so none
        is silently resized."""
        from PIL import Image

        for name in classes:
            folder = os.path.join(root, name)
            for file in sorted(f for f in os.listdir(folder) if f.lower().endswith(IMAGE_EXTENSIONS)):
                path = os.path.join(folder, file)
                try:
                    with Image.open(path) as image:
                        width, height = image.size
                except Exception as error:
                    raise DataError(f"benchmark.path: cannot read image {path!r} "
                                    f"({error.__class__.__name__})") from None
                if (height, width) != tuple(size):
                    raise DataError(
                        f"benchmark.path: {path!r} is {height}x{width} but the training images are "
                        f"{size[0]}x{size[1]}; set benchmark.image_size to resize every image"
                    )

    def _image_size(self, root, classes):
        if self.config.image_size is not None:
            return self.config.image_size, self.config.image_size
        from PIL import Image

        first_dir = os.path.join(root, classes[0])
        first = sorted(f for f in os.listdir(first_dir) if f.lower().endswith(IMAGE_EXTENSIONS))[0]
        with Image.open(os.path.join(first_dir, first)) as image:
            width, height = image.size
        return height, width

    def _load(self, split):
        import keras

        root, classes = self._class_dirs(split)
        train_classes = self._class_dirs("train")[1]
        if classes != train_classes:
            raise DataError(f"benchmark.path: {root!r} has classes {classes[:5]}... "
                            f"but train/ has {train_classes[:5]}...")
        train_root = os.path.join(self.config.path, "train")
        size = self._image_size(train_root, train_classes)
        if self.config.image_size is None:
            self._check_native_sizes(root, classes, size)
        try:
            dataset = keras.utils.image_dataset_from_directory(
                root,
                labels="inferred",
                label_mode="int",
                class_names=classes,
                color_mode=self.config.color_mode,
                batch_size=256,
                image_size=size,
                shuffle=False,
                verbose=False,
            )
            images, labels = [], []
            for x, y in dataset.as_numpy_iterator():
                images.append(np.clip(np.round(x), 0, 255).astype(np.uint8))
                labels.append(y.astype(np.int64))
        except Exception as error:
            message = f"benchmark.path: cannot read images under {root!r} ({error.__class__.__name__}: {error})"
            raise DataError(message.splitlines()[0]) from None
        return SplitData(np.concatenate(images), np.concatenate(labels))


# ------------------------------------------------------------------------------------- tfds
class TfdsSource(Source):
    name = "tfds"

    def _builder(self):
        import tensorflow_datasets as tfds

        try:
            return tfds.builder(self.config.dataset, data_dir=self.config.path)
        except Exception as error:
            raise DataError(
                f"benchmark.dataset: TFDS has no dataset {self.config.dataset!r} ({error.__class__.__name__}); "
                "allowed: mnist, fashion_mnist, cifar10, cifar100, svhn_cropped"
            ) from None

    def native_num_classes(self):
        builder = self._builder()
        label = builder.info.features["label"]
        return int(label.num_classes)

    def class_names(self):
        try:
            return list(self._builder().info.features["label"].names)
        except Exception:  # a dataset without named labels
            return None

    def _load(self, split):
        import tensorflow_datasets as tfds

        try:
            dataset = tfds.load(
                self.config.dataset,
                split=split,
                as_supervised=True,
                data_dir=self.config.path,
                download=True,
            )
            # Batched reads, not batch_size=-1: that batches by the split size recorded in the
            # dataset's metadata and falls back to sys.maxsize (a crash) when it is missing.
            images, labels = [], []
            for x, y in tfds.as_numpy(dataset.batch(4096)):
                images.append(x)
                labels.append(y)
            if not images:
                raise ValueError("the split is empty")
            images, labels = np.concatenate(images), np.concatenate(labels)
        except Exception as error:
            message = str(error).splitlines()[0] if str(error) else error.__class__.__name__
            raise DataError(
                f"TFDS dataset {self.config.dataset!r} ({split}) could not be loaded: {message}; "
                "download it where there is internet (tfds build) or use source idx, npz or folder"
            ) from None
        images = _as_uint8_images(images, f"TFDS {self.config.dataset} ({split})")
        return SplitData(images, _as_labels(labels, len(images), f"TFDS {self.config.dataset} ({split})"))

    def describe(self):
        return f"TFDS dataset {self.config.dataset!r}"


SOURCES = {
    "tfds": TfdsSource,
    "idx": IdxSource,
    "npz": NpzSource,
    "folder": FolderSource,
    "digits": DigitsSource,
}


def make_source(benchmark_config) -> Source:
    return SOURCES[benchmark_config.source](benchmark_config)
