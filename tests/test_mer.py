"""MER (Algorithm 1): the update against hand-computed SGD / Reptile steps, and a digits run."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from gcl_tf import config as config_lib
from gcl_tf import methods
from gcl_tf.errors import ConfigError
from gcl_tf.methods import mer
from gcl_tf.train import run

DIGITS = {"name": "permuted", "dataset": "digits", "source": "digits", "num_tasks": 3, "samples_per_task": 300}
LR = 0.1


def make_config(method, batch_size=1, optimizer="sgd"):
    return config_lib.resolve({
        "seed": 0,
        "benchmark": dict(DIGITS),
        "method": {"name": "mer", **method},
        "model": {"backbone": "mlp", "hidden_size": 32},
        "train": {"batch_size": batch_size, "learning_rate": LR, "optimizer": optimizer},
        "eval": {"batch_size": 450},
    })


def make_model(batch_size=1, **method):
    config = make_config(method, batch_size)
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    return model


def weights(model):
    return [v.numpy().copy() for v in model.network.trainable_variables]


def sgd(model, start, x, y, steps=1):
    """``steps`` plain SGD steps on (x, y) from the weights ``start``; returns the weights."""
    variables = model.network.trainable_variables
    saved = weights(model)
    for v, w in zip(variables, start):
        v.assign(w)
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.constant(y), logits=model.network(tf.constant(x), training=True)))
        for v, g in zip(variables, tape.gradient(loss, variables)):
            v.assign_sub(LR * g)
    out = weights(model)
    for v, w in zip(variables, saved):
        v.assign(w)
    return out


def sample(rng, n):
    return (rng.uniform(size=(n, 8, 8, 1)).astype(np.float32), rng.integers(0, 10, size=n).astype(np.int32))


def assert_weights_close(a, b):
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


def test_beta_gamma_one_single_batch_is_plain_sgd():
    model = make_model(beta=1.0, gamma=1.0, batches_per_example=1, replay_batch_size=3)
    x, y = sample(np.random.default_rng(0), 1)
    expected = sgd(model, weights(model), x, y)  # the memory is empty: only the example itself
    model.learn(tf.constant(x), tf.constant(y))
    assert_weights_close(weights(model), expected)
    assert int(model.memory.num_filled.numpy()) == 1


def test_batch_is_the_example_then_memory_samples_one_sgd_step_each():
    model = make_model(beta=1.0, gamma=1.0, batches_per_example=1, replay_batch_size=1)
    rng = np.random.default_rng(1)
    x1, y1 = sample(rng, 1)
    x2, y2 = sample(rng, 1)
    model.learn(tf.constant(x1), tf.constant(y1))
    start = weights(model)
    expected = sgd(model, sgd(model, start, x2, y2), x1, y1)  # the example first, then the memory's x1
    model.learn(tf.constant(x2), tf.constant(y2))
    assert_weights_close(weights(model), expected)


def test_within_batch_meta_update_scales_by_beta():
    model = make_model(beta=0.3, gamma=1.0, batches_per_example=1)
    x, y = sample(np.random.default_rng(2), 1)
    start = weights(model)
    after = sgd(model, start, x, y)
    model.learn(tf.constant(x), tf.constant(y))
    assert_weights_close(weights(model), [s + 0.3 * (a - s) for s, a in zip(start, after)])


def test_across_batch_meta_update_scales_by_gamma():
    model = make_model(beta=1.0, gamma=0.5, batches_per_example=3)
    x, y = sample(np.random.default_rng(3), 1)
    start = weights(model)
    after = sgd(model, start, x, y, steps=3)  # three batches holding only the example
    model.learn(tf.constant(x), tf.constant(y))
    assert_weights_close(weights(model), [s + 0.5 * (a - s) for s, a in zip(start, after)])


def test_examples_of_a_batch_are_learned_in_order_and_stored():
    model = make_model(batch_size=2, beta=1.0, gamma=1.0, batches_per_example=1, replay_batch_size=1)
    x, y = sample(np.random.default_rng(4), 2)
    # example 0 alone (memory empty), then example 1 followed by the stored example 0
    w = sgd(model, weights(model), x[:1], y[:1])
    expected = sgd(model, sgd(model, w, x[1:], y[1:]), x[:1], y[:1])
    model.learn(tf.constant(x), tf.constant(y))
    assert_weights_close(weights(model), expected)
    assert int(model.memory.num_seen.numpy()) == 2


def test_only_sgd_is_allowed():
    import keras

    with pytest.raises(ConfigError, match="train.optimizer"):
        make_config({}, optimizer="adam")
    model = mer.MER(num_classes=10, input_shape=(8, 8, 1))
    for optimizer in (keras.optimizers.Adam(0.1), keras.optimizers.SGD(0.1, momentum=0.9)):
        with pytest.raises(ConfigError, match="optimizer: mer uses plain SGD"):
            model.compile(optimizer=optimizer)
    model.compile(optimizer=keras.optimizers.SGD(0.05))
    assert model.learning_rate == pytest.approx(0.05)


@pytest.mark.slow
def test_learns_permuted_digits_and_is_deterministic(tmp_path):
    config = make_config({"memory_size": 100, "replay_batch_size": 5, "batches_per_example": 2, "beta": 0.1}, 10)
    first = run(config, output_dir=str(tmp_path / "a"), verbose=0)
    assert first["acc"] > 40.0  # chance: 10%
    second = run(config, output_dir=str(tmp_path / "b"), verbose=0)
    np.testing.assert_allclose(first["accuracy_matrix"], second["accuracy_matrix"])
