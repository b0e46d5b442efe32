"""Shared fixtures: tiny configs on the bundled digits and small data files written to tmp_path."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before anything imports TensorFlow

import gzip
import json
import struct
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A small, fast experiment on scikit-learn's bundled digits (no file, no network).
TINY = {
    "seed": 0,
    "benchmark": {
        "name": "permuted",
        "dataset": "digits",
        "source": "digits",
        "num_tasks": 3,
        "samples_per_task": 100,
    },
    "method": {"name": "finetune"},
    "model": {"backbone": "mlp", "hidden_size": 32},
    "train": {"batch_size": 10, "learning_rate": 0.1, "verbose": 0, "log_every": 0},
    "eval": {"batch_size": 128},
}


def _deep_update(base: dict, update: dict) -> dict:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_update(out[key], value)
        else:
            out[key] = value
    return out


def fresh_env(**extra) -> dict:
    """The environment of a fresh TensorFlow process a test starts: quiet, no GPU, no TF_CONFIG."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", **extra)
    env.pop("TF_CONFIG", None)
    return env


def run_script(path, text: str, *args, tag: str = "REPORT", timeout: int = 300):
    """Writes ``text`` to ``path`` and runs it in a fresh Python (logical devices are set before
    TensorFlow starts, so a test of two logical CPUs needs its own process); returns the JSON the
    script printed on its line starting with ``tag``."""
    path.write_text(text)
    proc = subprocess.run([sys.executable, str(path), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=fresh_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith(tag + " "))
    return json.loads(line[len(tag) + 1:])


@pytest.fixture
def make_config():
    """``make_config({"benchmark": {...}}, ["train.epochs=2"])`` -> a validated Config."""
    from gcl_tf.config import resolve

    def build(update: dict | None = None, overrides=()):
        return resolve(_deep_update(TINY, update or {}), list(overrides))

    return build


# ------------------------------------------------------------------------------ data files
def write_idx(path, array: np.ndarray) -> None:
    """Write a uint8 array as an MNIST-format IDX file (gzipped when ``path`` ends in .gz)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as handle:
        handle.write(header + array.tobytes())


def ramp_image(shape) -> np.ndarray:
    """An image whose pixels are all different (so a permutation of it can be read back)."""
    size = int(np.prod(shape))
    assert size <= 256
    return (np.arange(size) * (256 // size)).astype(np.uint8).reshape(shape)


def random_split(n: int, shape, num_classes: int, seed: int):
    """``n`` random uint8 images (all different; the first is the ramp) and balanced labels."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n,) + tuple(shape), dtype=np.uint8)
    images[0] = ramp_image(shape)
    labels = np.arange(n) % num_classes
    rng.shuffle(labels[1:])
    return images, labels.astype(np.int64)


@pytest.fixture
def npz_file(tmp_path):
    """A Keras-style .npz (x_train [200, 8, 8], y_train, x_test [60, 8, 8], y_test), 10 classes."""
    x_train, y_train = random_split(200, (8, 8), 10, seed=1)
    x_test, y_test = random_split(60, (8, 8), 10, seed=2)
    path = tmp_path / "data.npz"
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path, (x_train, y_train, x_test, y_test)


@pytest.fixture
def npz_config(make_config, npz_file):
    """``npz_config(benchmark_update, overrides)`` -> a Config reading ``npz_file``."""
    path, _ = npz_file

    def build(benchmark: dict | None = None, overrides=()):
        bench = {"source": "npz", "dataset": "synthetic", "path": str(path), "samples_per_task": None}
        bench.update(benchmark or {})
        return make_config({"benchmark": bench}, overrides)

    return build


@pytest.fixture(autouse=True)
def _seeded_global_rngs():
    """Every test starts from the same global Python, NumPy and TensorFlow/Keras random state, so
    weight initialisation (and so a test's outcome) does not depend on which tests ran before."""
    import keras

    keras.utils.set_random_seed(0)
    yield


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a test that takes more than about 10 seconds here")
