"""Data: sources -> continual protocols -> tf.data streams.

``load(name, source=..., path=...)`` reads a dataset for :mod:`gcl_tf.benchmarks`.
"""
from __future__ import annotations

from typing import Optional

from gcl_tf.data.protocols import ContinualBenchmark, Task
from gcl_tf.data.sources import SOURCES, Source, SplitData, make_source, read_idx

__all__ = ["ContinualBenchmark", "Task", "SOURCES", "Source", "SplitData", "load", "make_source", "read_idx"]


def load(name: str, source: Optional[str] = None, path: Optional[str] = None, num_classes: Optional[int] = None,
         image_size: Optional[int] = None, color_mode: str = "rgb") -> Source:
    """A dataset's train and test splits (read when first used), as uint8 images and int labels.

    ``source``: ``tfds`` (``name`` a TFDS name; ``path`` its optional data_dir), ``idx`` (``path``
    a folder of MNIST-format files), ``npz`` (``path`` a Keras-style .npz), ``folder`` (``path``
    a root with train/<class>/ and test/<class>/ images) or ``digits`` (scikit-learn's 8x8
    digits); default: ``digits`` for the name ``"digits"``, else ``tfds``. ``num_classes``: None
    infers it; ``image_size`` and ``color_mode``: the folder source's resizing and colours.
    """
    from gcl_tf.config import BenchmarkConfig, build_dataclass
    from gcl_tf.errors import ConfigError

    source = source or ("digits" if name == "digits" else "tfds")
    config = build_dataclass(BenchmarkConfig, {"dataset": name, "source": source, "path": path,
                                               "num_classes": num_classes, "image_size": image_size,
                                               "color_mode": color_mode}, "data.load")
    if source in ("idx", "npz", "folder") and not path:
        raise ConfigError(f"data.load.path: required for source {source}; give the data location")
    return make_source(config)
