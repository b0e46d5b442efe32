"""What the library knows of a dataset before reading it (issue 71), so that a mistake is one line
before TensorFlow loads, not a TFDS error or a numpy MemoryError minutes later:

- :data:`DATASETS`: the TFDS names it supports and scikit-learn's digits, with their image shape,
  split sizes and classes; :func:`check_tfds_name`: a name outside them, with a did-you-mean;
- :func:`check_sizes`: the sizes a user sets (``benchmark.num_tasks``, ``samples_per_task``,
  ``eval.batch_size``, ``model.hidden_size``, ``model.filters``) against the RAM their arrays
  take (the tasks' data, the T x T accuracy matrices, an evaluation batch, the weights);
- :func:`precheck`: both, for a whole config (the split protocol's classes too).

Nothing here imports TensorFlow or reads the data.
"""
from __future__ import annotations

import difflib
import math
from typing import NamedTuple, Optional

from gcl_tf.errors import ConfigError, DataError


class Known(NamedTuple):
    shape: tuple  # one image, (H, W, C)
    train: int  # training samples
    test: int  # test samples
    classes: int


# The TFDS datasets the library supports (image, label), and the bundled digits (source digits).
TFDS_DATASETS = {
    "mnist": Known((28, 28, 1), 60000, 10000, 10),
    "fashion_mnist": Known((28, 28, 1), 60000, 10000, 10),
    "cifar10": Known((32, 32, 3), 50000, 10000, 10),
    "cifar100": Known((32, 32, 3), 50000, 10000, 100),
    "svhn_cropped": Known((32, 32, 3), 73257, 26032, 10),
}
DIGITS = Known((8, 8, 1), 1347, 450, 10)  # scikit-learn's 1797 digits, a quarter held out for test
# Names a new user tries for them: their other spellings, and what TFDS does not serve as such.
ALIASES = {"svhn": "svhn_cropped", "fashion-mnist": "fashion_mnist", "fmnist": "fashion_mnist",
           "cifar-10": "cifar10", "cifar-100": "cifar100"}
NOT_TFDS = {"imagenet": "ImageNet and Mini-ImageNet are not TFDS datasets here: convert your copy with python -m "
                        "gcl_tf.data to-npz and use benchmark.source: npz (docs/configuration.md)",
            "miniimagenet": "ImageNet and Mini-ImageNet are not TFDS datasets here: convert your copy with python -m "
                            "gcl_tf.data to-npz and use benchmark.source: npz (docs/configuration.md)"}

FLOAT64, FLOAT32 = 8, 4
MATRICES = 3  # T x T float64 accuracy matrices a run holds (the evaluator's, its checkpoint's, the results')
TRAINING_COPIES = 4  # a weight, its gradient and two Adam slots


def _folded(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def suggestion(name: str) -> Optional[str]:
    """The supported TFDS name ``name`` most likely means, or None."""
    folded = {_folded(k): k for k in TFDS_DATASETS}
    if name.lower() in ALIASES:
        return ALIASES[name.lower()]
    if _folded(name) in folded:
        return folded[_folded(name)]
    prefixed = [v for k, v in folded.items() if k.startswith(_folded(name)) and _folded(name)]
    if len(prefixed) == 1:
        return prefixed[0]
    close = difflib.get_close_matches(_folded(name), list(folded), n=1, cutoff=0.75)
    return folded[close[0]] if close else None


def check_tfds_name(name: str, key: str = "benchmark.dataset") -> None:
    """A one-line DataError (as TFDS's own refusal was) unless ``name`` is a TFDS dataset the
    library supports."""
    if name in TFDS_DATASETS:
        return
    allowed = f"allowed: {', '.join(TFDS_DATASETS)} (or another source: npz, idx, folder, digits)"
    close = suggestion(str(name))
    hint = f"did you mean {close!r}? " if close else ""
    for stem, note in NOT_TFDS.items():
        if stem in _folded(str(name)):
            hint = note + "; "
    raise DataError(f"{key}: {name!r} is not a TFDS dataset gcl_tf supports; {hint}{allowed}")


def known(benchmark) -> Optional[Known]:
    """What the library knows of the benchmark's data before reading it (None: a file's)."""
    if benchmark.source == "digits":
        return DIGITS
    if benchmark.source == "tfds":
        return TFDS_DATASETS.get(benchmark.dataset)
    return None


def _gib(size: float) -> str:
    return f"{size / 2**30:.1f} GiB"


def weight_count(model, pixels: int, classes: int) -> tuple[str, int]:
    """``(key, weights)``: the size key that sets most of the backbone's weights, and about how many."""
    if model.backbone == "mlp":
        h = model.hidden_size
        return "model.hidden_size", pixels * h + h * h + h * classes
    filters = model.filters or (64 if model.backbone == "convnet" else 20)
    per_square = 36 if model.backbone == "convnet" else 3100  # 3x3 kernels: 4 layers; ResNet-18's 17 at widths x1..x8
    return "model.filters", per_square * filters * filters + 8 * filters * classes


def check_sizes(b, shape, train: int, test: int, classes: int, eval_batch_size: int = 0, model=None,
                available: Optional[int] = None) -> None:
    """A one-line ConfigError naming the size key when the arrays that the ``benchmark`` section
    ``b`` (and ``eval.batch_size``, the ``model`` section, when given) size need more than the
    ``available`` bytes of RAM (default: the host's, :func:`gcl_tf.resources.host_available`)."""
    from gcl_tf.resources import host_available

    available = host_available() if available is None else available
    if not available:
        return
    pixels = math.prod(int(d) for d in shape)
    share = min(b.classes_per_task / classes, 1.0) if b.name == "split" else 1.0
    per_task = sum(min(wanted, int(count * share)) if wanted else int(count * share)
                   for wanted, count in ((b.samples_per_task, train), (b.test_samples_per_task, test)))
    run_tasks = b.num_tasks if b.tasks is None else len(b.tasks)
    data = run_tasks * per_task * pixels
    matrices = MATRICES * FLOAT64 * b.num_tasks ** 2
    evaluation = eval_batch_size * (pixels * (1 + FLOAT32) + classes * FLOAT32 + 12)
    key, weights = weight_count(model, pixels, classes) if model is not None else ("model", 0)
    parts = {"benchmark.num_tasks": (data + matrices, f"{run_tasks} tasks' data {_gib(data)}, their accuracy "
                                                      f"matrices {_gib(matrices)}"),
             "eval.batch_size": (evaluation, f"an evaluation batch {_gib(evaluation)}"),
             key: (weights * FLOAT32 * TRAINING_COPIES,
                   f"about {weights:,} weights and their training state {_gib(weights * FLOAT32 * TRAINING_COPIES)}")}
    total = sum(size for size, _ in parts.values())
    if total <= available:
        return
    name, (size, what) = max(parts.items(), key=lambda item: item[1][0])
    room = available - (total - size)
    value = {"benchmark.num_tasks": b.num_tasks, "eval.batch_size": eval_batch_size,
             "model.hidden_size": model and model.hidden_size, "model.filters": model and model.filters}.get(name)
    raise ConfigError(f"{name}: {value or 'the default'} needs about {_gib(total)} of RAM ({what}) but "
                      f"{_gib(available)} is available; allowed: {_allowed(name, room, per_task, pixels)}")


def _allowed(key: str, room: float, per_task: int, pixels: int) -> str:
    if room <= 0:
        return "smaller sizes (the other keys' arrays alone fill the RAM)"
    if key == "benchmark.num_tasks":  # MATRICES * 8 T^2 + T * per_task * pixels <= room
        a, d = MATRICES * FLOAT64, per_task * pixels
        return f"at most {int((-d + math.sqrt(d * d + 4 * a * room)) / (2 * a))} tasks here"
    if key == "eval.batch_size":
        return f"at most {int(room / (pixels * 5 + 12))} here"
    return "a smaller value"


def check_augment(b, shape) -> None:
    """``benchmark.augment: ocl`` (its colour jitter and grayscale) only on colour images."""
    if b.augment == "ocl" and int(shape[-1]) != 3:
        size = "x".join(str(int(d)) for d in shape[:-1])
        raise ConfigError(f"benchmark.augment: ocl jitters colours and turns images gray, but the {b.dataset} images "
                          f"are {size} with {int(shape[-1])} channel(s); allowed: none, flip or crop_flip (ocl: colour "
                          "images)")


def precheck(config) -> None:
    """The benchmark's dataset name (TFDS), the split protocol's classes and the sizes (above),
    from what the library knows of the data; a file's data is checked once read
    (:class:`gcl_tf.data.ContinualBenchmark`)."""
    b = config.benchmark
    if b.source == "tfds":
        check_tfds_name(b.dataset)
    data = known(b)
    if data is None:
        return
    check_augment(b, data.shape)
    classes = b.num_classes or data.classes
    if b.name == "split" and b.num_tasks * b.classes_per_task > classes:
        raise ConfigError(f"benchmark.num_tasks: {b.num_tasks} tasks x {b.classes_per_task} classes "
                          f"(benchmark.classes_per_task) need {b.num_tasks * b.classes_per_task} classes but "
                          f"{b.dataset} has {classes}; allowed: num_tasks at most {classes // b.classes_per_task}")
    check_sizes(b, data.shape, data.train, data.test, classes, config.eval.batch_size, config.model)
