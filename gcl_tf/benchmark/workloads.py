"""What the speed benchmarks time: a method's model built from a small config (with the settings
of the method's own speed checks, gcl_tf/speed/), random batches, and its training step
compiled with a trace counter and run once the memory is full."""
from __future__ import annotations

import numpy as np

from gcl_tf.benchmark.timing import median_seconds


def make_model(method: str, input_shape, memory: int | None = None, backbone: str = "mlp", hidden: int = 256,
               steps_per_execution: int = 1, mixed_precision: str = "float32", augment: str = "none",
               filters: int | None = None, settings: dict | None = None, **method_keys):
    """The method's model, compiled for training, built from a small config: SGD at 0.1, or the
    config sections ``settings`` give (a method's speed checks' ``SETTINGS``: gcl_tf.speed.make_model
    passes them), under ``method_keys``."""
    from gcl_tf import config as config_lib
    from gcl_tf import methods

    settings = settings or {}
    method_section = {**settings.get("method", {}), "name": method, **method_keys}
    if memory is not None:
        method_section["memory_size"] = memory
    config = config_lib.resolve({
        "seed": 0,
        "benchmark": {"source": "digits", "augment": augment},
        "method": method_section,
        "model": {"backbone": backbone, "hidden_size": hidden, **({"filters": filters} if filters else {})},
        "train": {"optimizer": "sgd", "learning_rate": 0.1, **settings.get("train", {}),
                  "steps_per_execution": steps_per_execution, "mixed_precision": mixed_precision},
    })
    model = methods.build(config, input_shape, 10)
    model.compile_for_training(config.train)
    return model


def random_batches(input_shape, count: int, batch: int = 10, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.random((count * batch,) + tuple(input_shape), dtype=np.float32)
    y = rng.integers(0, 10, count * batch).astype(np.int32)
    return x, y


def counting_step(model, jit_compile: bool = False):
    """A tf.function over the model's train_step, with a Python-side trace counter."""
    import tensorflow as tf

    traces = []

    def step(x, y):
        traces.append(1)
        return model.train_step((x, y))

    return tf.function(step, jit_compile=jit_compile), traces


def fill_memory(step, model, input_shape):
    """Runs ``step`` on random batches until the memory is full (the steady state); returns one
    more batch, not yet seen."""
    import tensorflow as tf

    fill = -(-model.memory.capacity // 10) + 2
    x, y = random_batches(input_shape, fill + 1)
    for i in range(fill):
        step(tf.constant(x[i * 10:(i + 1) * 10]), tf.constant(y[i * 10:(i + 1) * 10]))
    return x[-10:], y[-10:]


def prepare_train_step(model, input_shape, jit_compile: bool = False):
    """``(one, traces)``: ``one()`` runs one compiled training step on a batch not yet seen, once
    the memory is full, and waits for it (reads its loss); ``traces`` counts the step's traces."""
    import tensorflow as tf

    step, traces = counting_step(model, jit_compile)
    x, y = fill_memory(step, model, input_shape)
    bx, by = tf.constant(x), tf.constant(y)

    def one():
        logs = step(bx, by)
        float(logs["loss"])

    return one, traces


def time_train_step(model, input_shape, repeats: int, jit_compile: bool = False, reference=None):
    """Median seconds per training step once the memory is full, the number of traces, and the
    matmul's GFLOP/s timed in turns with the steps (None without a ``reference``)."""
    one, traces = prepare_train_step(model, input_shape, jit_compile)
    if reference is None:
        return median_seconds(one, repeats), len(traces), None
    seconds, rate = reference.paired(one, repeats)
    return seconds, len(traces), rate
