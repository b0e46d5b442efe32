"""What the GCL tests build: a small GCL config and model (the paper's mechanics unless asked),
batches of digits, the paper's head, a small GCL trained a few steps, a split-digits run's accuracy."""


import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from gcl_tf import config as config_lib
from gcl_tf import methods

tfd = tfp.distributions


def make_config(**method):
    raw = {
        "seed": 3,
        "benchmark": {"name": "permuted", "source": "digits", "dataset": "digits", "num_tasks": 2,
                      "samples_per_task": 100},
        # the paper's mechanics unless a test asks for our extensions (regularize_below, kernel_width)
        "method": {"name": "gcl", "memory_size": 30, "regularize_below": None, "kernel_width": None, **method},
        "model": {"backbone": "mlp", "hidden_size": 16},
        "train": {"optimizer": "adam", "learning_rate": 0.001, "batch_size": 10},
    }
    return config_lib.resolve(raw)


# The paper's head and loss (the defaults add our own_latent and target_loss present): for the
# tests that compare with the paper's formulation written out by hand.
PAPER_HEAD = {"own_latent": False, "target_loss": "all"}


def make_model(**method):
    config = make_config(**method)
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    return model


def batches(count, seed=0, batch=10):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield (tf.constant(rng.random((batch, 8, 8, 1), dtype=np.float32)),
               tf.constant(rng.integers(0, 10, batch), dtype=tf.int32))


def small_gcl(**keys):
    import keras

    import gcl_tf

    keras.utils.set_random_seed(0)
    model = gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), memory_size=20, hidden_size=16, **keys)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    rng = np.random.default_rng(0)
    x, y = rng.random((40, 8, 8, 1), dtype=np.float32), np.arange(40) % 10
    return model, tf.data.Dataset.from_tensor_slices((x, y)).batch(10)


def split_digits_acc(trunk, seed, **keys):
    """Final ACC (%) on validation of GCL with the constructor's defaults (and ``keys``) on split
    digits as a user runs it from Python: 5 tasks, memory 200, Adam 1e-3, one epoch."""
    import keras

    import gcl_tf

    keras.utils.set_random_seed(seed)
    stream = gcl_tf.benchmarks.split("digits", num_tasks=5, validation_fraction=0.2, seed=seed)
    layers = ([keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.Conv2D(64, 3, activation="relu"),
               keras.layers.Flatten()] if trunk == "cnn" else
              [keras.layers.Flatten(), keras.layers.Dense(256, activation="relu"),
               keras.layers.Dense(256, activation="relu")])
    backbone = keras.Sequential([keras.Input(stream.input_shape), *layers])
    model = gcl_tf.GCL(backbone=backbone, num_classes=10, memory_size=200, **keys)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    for task in stream:
        model.fit(task.train, verbose=0)
    return 100 * np.mean([model.evaluate(t.validation, verbose=0, return_dict=True)["accuracy"] for t in stream])

