"""Data: sources -> continual protocols -> tf.data streams.

``load(name, source=..., path=...)`` reads a dataset for :mod:`gcl_tf.benchmarks`; the
``benchmark`` config section is declared in :mod:`gcl_tf.data.config`.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from gcl_tf.data.sources import Source

# Imported on first use, so that the config (gcl_tf.data.config) is read without TensorFlow.
_EXPORTS = {"ContinualBenchmark": "protocols", "Task": "protocols", "SOURCES": "sources", "Source": "sources",
            "SplitData": "sources", "make_source": "sources", "read_idx": "sources"}

__all__ = ["ContinualBenchmark", "Task", "SOURCES", "Source", "SplitData", "load", "make_source", "read_idx"]


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gcl_tf.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"gcl_tf.data.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def load(name: str, source: Optional[str] = None, path: Optional[str] = None, num_classes: Optional[int] = None,
         image_size: Optional[int] = None, color_mode: Optional[str] = None) -> Source:
    """A dataset's train and test splits (read when first used), as uint8 images and int labels.

    ``source``: ``tfds`` (``name`` a TFDS name; ``path`` its optional data_dir), ``idx`` (``path``
    a folder of MNIST-format files), ``npz`` (``path`` a Keras-style .npz), ``folder`` (``path``
    a root with train/<class>/ and test/<class>/ images) or ``digits`` (scikit-learn's 8x8
    digits); default: ``digits`` for the name ``"digits"``, else ``tfds``. ``num_classes``: None
    infers it; ``image_size`` and ``color_mode``: the folder source's resizing and colours
    (``color_mode`` None: the images' own, grayscale when every image has one channel).
    """
    from gcl_tf.data.config import BenchmarkConfig
    from gcl_tf.data.sources import make_source
    from gcl_tf.errors import ConfigError
    from gcl_tf.schema import build_dataclass

    source = source or ("digits" if name == "digits" else "tfds")
    config = build_dataclass(BenchmarkConfig, {"dataset": name, "source": source, "path": path,
                                               "num_classes": num_classes, "image_size": image_size,
                                               "color_mode": color_mode}, "data.load")
    if source in ("idx", "npz", "folder") and not path:
        raise ConfigError(f"data.load.path: required for source {source}; give the data location")
    return make_source(config)
