"""Image sources: each returns whole splits as uint8 arrays ``[N, H, W, C]`` with int64 labels.

- ``tfds``: TensorFlow Datasets (mnist, fashion_mnist, cifar10, cifar100, svhn_cropped, ...).
- ``idx``: a folder of MNIST-format files (``train-images-idx3-ubyte[.gz]`` ...), such as Debian's
  ``dataset-fashion-mnist`` in ``/usr/share/datasets/fashion-mnist``.
- ``npz``: a Keras-style ``.npz`` with ``x_train, y_train, x_test, y_test``.
- ``folder``: ``train/<class>/*.png|jpg`` and ``test/<class>/*`` (classes in sorted name order).
- ``digits``: scikit-learn's bundled 8x8 digits (1,797 images; a fixed stratified 75/25 split).

A split is loaded only when asked for: a run that evaluates on validation data never reads the
test split.

This module holds the registry (``SOURCES``, ``make_source``) and the two sources a library
provides (digits, tfds); base.py what every source shares (``SplitData``, ``Source``), files.py
the sources that read files (idx, npz, folder).
"""
from __future__ import annotations

import numpy as np

from gcl_tf.data.base import Source, SplitData, _as_labels, _as_uint8_images
from gcl_tf.data.files import FolderSource, IdxSource, NpzSource, read_idx  # noqa: F401 (read_idx: re-exported)
from gcl_tf.errors import DataError


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


# ------------------------------------------------------------------------------------- tfds
class TfdsSource(Source):
    name = "tfds"
    uses_tensorflow = True

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

        from gcl_tf.data.tfds_files import data_dir, download_guard

        try:
            with download_guard(data_dir(self.config.path), self.config.dataset):  # offline: fails fast, leaves nothing
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
            raise DataError(self._failure(split, error)) from None
        images = _as_uint8_images(images, f"TFDS {self.config.dataset} ({split})")
        return SplitData(images, _as_labels(labels, len(images), f"TFDS {self.config.dataset} ({split})"))

    def _failure(self, split, error) -> str:
        """One line on why TFDS could not load ``split``: a Python module TFDS needs is missing, the
        network is (the dataset is not prepared in the data_dir and cannot be downloaded), or
        anything else, in TFDS's words."""
        what = f"TFDS dataset {self.config.dataset!r} ({split})"
        missing = _in_chain(error, lambda e: isinstance(e, ImportError))
        if missing is not None:
            module = getattr(missing, "name", None) or str(missing)
            return (f"{what} could not be loaded: TFDS needs the Python module {module!r}, which is not installed "
                    f"(not a network problem); install it (pip install {module}) or reinstall gcl_tf, which "
                    "depends on it")
        offline = _in_chain(error, _is_network_error)
        if offline is not None:
            from gcl_tf.data.tfds_files import data_dir

            folder = data_dir(self.config.path)
            reason = _first_line(offline)
            return (f"{what} is not prepared in {folder} and could not be downloaded: no network "
                    f"({type(offline).__name__}: {reason}); prepare it where there is internet (tfds build "
                    f"{self.config.dataset} --data_dir DIR, then benchmark.path: DIR) or use source idx, npz or folder")
        return f"{what} could not be loaded: {type(error).__name__}: {_first_line(error)}"

    def describe(self):
        return f"TFDS dataset {self.config.dataset!r}"


def _first_line(error) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else error.__class__.__name__


def _in_chain(error, matches):
    """The first exception of ``error``'s chain (itself, then its causes and contexts) that ``matches``."""
    seen = set()
    while error is not None and id(error) not in seen:
        if matches(error):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _is_network_error(error) -> bool:
    """A failed connection, name lookup or timeout, as ``socket``, ``urllib`` or ``requests`` (what
    TFDS downloads with) report it."""
    import socket
    import urllib.error

    if isinstance(error, (ConnectionError, TimeoutError, socket.gaierror, urllib.error.URLError)):
        return True
    try:
        import requests
    except ImportError:
        return False
    return isinstance(error, (requests.exceptions.ConnectionError, requests.exceptions.Timeout))


SOURCES = {
    "tfds": TfdsSource,
    "idx": IdxSource,
    "npz": NpzSource,
    "folder": FolderSource,
    "digits": DigitsSource,
}


def make_source(benchmark_config) -> Source:
    if benchmark_config.source == "tfds":  # a name it does not support: one line now, not TFDS's words later
        from gcl_tf.data.known import check_tfds_name

        check_tfds_name(benchmark_config.dataset)
    return SOURCES[benchmark_config.source](benchmark_config)
