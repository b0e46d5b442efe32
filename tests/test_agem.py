"""A-GEM: the projection formula, the reference batch from past tasks only, a permuted-digits run."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from gcl_tf import methods
from gcl_tf.methods import agem
from gcl_tf.methods.common import flatten
from gcl_tf.train import run

from helpers import digits_config  # noqa: E402


def test_projection_formula():
    rng = np.random.default_rng(0)
    for _ in range(20):
        g_ref = rng.normal(size=50)
        g = rng.normal(size=50)
        got = agem.agem_project(tf.constant(g), tf.constant(g_ref)).numpy()
        if g @ g_ref < 0:
            expected = g - (g @ g_ref) / (g_ref @ g_ref) * g_ref
            np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
            assert abs(got @ g_ref) < 1e-9 * np.abs(g).max() * np.abs(g_ref).max() * 50
        else:
            np.testing.assert_array_equal(got, g)
    # a conflicting case built on purpose, and a zero reference
    g_ref = [1.0, 0.0]
    np.testing.assert_allclose(agem.agem_project(tf.constant([-2.0, 3.0]), tf.constant(g_ref)).numpy(), [0.0, 3.0])
    zero = tf.constant([0.0, 0.0])
    np.testing.assert_allclose(agem.agem_project(tf.constant([-2.0, 3.0]), zero).numpy(), [-2.0, 3.0])


def test_reference_gradient_uses_past_tasks_only():
    config = digits_config({"name": "agem", "memory_size": 30, "agem_batch_size": 256})
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    assert model.reference_size == 20  # limited by the memory of the past tasks: 2 tasks x 10
    rng = np.random.default_rng(1)
    batches = []
    for task in range(2):
        model.on_task_begin(task, np.arange(10))
        x = rng.uniform(size=(10, 8, 8, 1)).astype(np.float32)
        y = rng.integers(0, 10, size=10).astype(np.int32)
        batches.append((x, y))
        model.learn(tf.constant(x), tf.constant(y))
    # at task 1 the reference is the whole memory of task 0 (10 samples < 256)
    variables = model.network.trainable_variables
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=batches[0][1], logits=model(tf.constant(batches[0][0]), training=True)))
    expected = flatten(tape.gradient(loss, variables), variables).numpy()
    got = model.reference_gradient(tf.constant(1)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    assert model.memory.valid_before(0).numpy().sum() == 0
    assert model.memory.valid_before(1).numpy().sum() == 10


def test_step_applies_the_projection():
    config = digits_config({"name": "agem", "memory_size": 30})
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    rng = np.random.default_rng(2)
    x = rng.uniform(size=(10, 8, 8, 1)).astype(np.float32)
    y0 = rng.integers(0, 10, size=10).astype(np.int32)
    model.on_task_begin(0, np.arange(10))
    model.learn(tf.constant(x), tf.constant(y0))
    model.on_task_begin(1, np.arange(10))
    y1 = ((y0 + 5) % 10).astype(np.int32)  # same images, other labels: conflicting gradients
    variables = model.network.trainable_variables
    g_ref = model.reference_gradient(tf.constant(1)).numpy()
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y1, logits=model(x, training=True)))
    g = flatten(tape.gradient(loss, variables), variables).numpy()
    assert g @ g_ref < 0
    before = np.concatenate([v.numpy().ravel() for v in variables])
    logs = model.learn(tf.constant(x), tf.constant(y1))
    applied = -(np.concatenate([v.numpy().ravel() for v in variables]) - before) / 0.1
    assert float(logs["projected"]) == 1.0
    expected = g - (g @ g_ref) / (g_ref @ g_ref) * g_ref
    np.testing.assert_allclose(applied, expected, atol=1e-5 * np.abs(expected).max())


@pytest.mark.slow
def test_learns_permuted_digits_and_is_deterministic(tmp_path):
    config = digits_config({"name": "agem", "memory_size": 150, "agem_batch_size": 64})
    first = run(config, output_dir=str(tmp_path / "a"), verbose=0)
    assert first["acc"] > 35.0  # chance: 10%
    second = run(config, output_dir=str(tmp_path / "b"), verbose=0)
    np.testing.assert_allclose(first["accuracy_matrix"], second["accuracy_matrix"])
