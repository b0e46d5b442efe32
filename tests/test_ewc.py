"""EWC: the empirical Fisher, the accumulated quadratic penalty, and a short permuted-digits run."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


import numpy as np
import pytest
import tensorflow as tf

from gcl_tf import methods
from gcl_tf.methods import ewc
from gcl_tf.train import run

from helpers import digits_config  # noqa: E402


def softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def test_empirical_fisher_is_mean_of_squared_per_sample_gradients():
    rng = np.random.default_rng(0)
    n, d, k = 7, 5, 3
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, k, size=n).astype(np.int32)
    W = tf.Variable(rng.normal(size=(d, k)).astype(np.float32))
    b = tf.Variable(rng.normal(size=(k,)).astype(np.float32))

    def nll(xi, yi):
        logits = tf.matmul(xi, W) + b
        return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yi, logits=logits))

    fw, fb = tf.function(lambda x, y: ewc.empirical_fisher(nll, [W, b], x, y))(x, y)
    # d(-log p(y|x))/dW = x (p - onehot)^T, per sample
    p = softmax(x @ W.numpy() + b.numpy())
    r = p - np.eye(k)[y]
    expected_w = np.mean([np.outer(x[i], r[i]) ** 2 for i in range(n)], axis=0)
    expected_b = np.mean(r ** 2, axis=0)
    np.testing.assert_allclose(fw.numpy(), expected_w, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(fb.numpy(), expected_b, rtol=1e-4, atol=1e-6)
    assert np.all(fw.numpy() >= 0) and np.all(fb.numpy() >= 0)
    # Not the square of the mean gradient (GEM's code): the empirical Fisher is larger.
    assert np.sum(expected_w) > np.sum(np.mean([np.outer(x[i], r[i]) for i in range(n)], axis=0) ** 2)


def test_squared_mean_gradient_is_gem_fisher():
    rng = np.random.default_rng(5)
    n, d, k = 6, 4, 3
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, k, size=n).astype(np.int32)
    W = tf.Variable(rng.normal(size=(d, k)).astype(np.float32))

    def nll(xb, yb):
        return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=tf.matmul(xb, W)))

    (fw,) = ewc.squared_mean_gradient(nll, [W], tf.constant(x), tf.constant(y))
    r = softmax(x @ W.numpy()) - np.eye(k)[y]
    np.testing.assert_allclose(fw.numpy(), (x.T @ r / n) ** 2, rtol=1e-4, atol=1e-7)


def test_accumulated_penalty_equals_the_sum_over_tasks():
    rng = np.random.default_rng(1)
    shapes = [(4, 3), (3,)]
    params = [tf.Variable(rng.normal(size=s).astype(np.float32)) for s in shapes]
    state = ewc.EWCState(params)
    anchors, fishers = [], []
    for _ in range(3):  # three tasks, each with its own anchor and Fisher
        for p in params:
            p.assign(rng.normal(size=p.shape).astype(np.float32))
        fisher = [rng.uniform(0, 2, size=s).astype(np.float32) * (rng.uniform(size=s) > 0.2) for s in shapes]
        anchors.append([p.numpy().copy() for p in params])
        fishers.append(fisher)
        state.consolidate([tf.constant(f) for f in fisher], params)
    for _ in range(5):
        point = [rng.normal(size=s).astype(np.float32) for s in shapes]
        explicit = sum(np.sum(F[i] * (point[i] - A[i]) ** 2) for A, F in zip(anchors, fishers) for i in range(2))
        got = state.penalty([tf.constant(q) for q in point]).numpy()
        np.testing.assert_allclose(got, explicit, rtol=1e-4)
    assert int(state.num_tasks.numpy()) == 3


def test_penalty_is_zero_at_the_anchor_and_grows_away_from_it():
    rng = np.random.default_rng(2)
    params = [tf.Variable(rng.normal(size=(5, 2)).astype(np.float32))]
    state = ewc.EWCState(params)
    state.consolidate([tf.constant(rng.uniform(0.1, 1.0, size=(5, 2)).astype(np.float32))], params)
    anchor = params[0].numpy()
    direction = rng.normal(size=(5, 2)).astype(np.float32)
    values = [float(state.penalty([tf.constant(anchor + t * direction)]).numpy()) for t in [0.0, 0.1, 0.5, 1.0, 2.0]]
    assert values[0] == pytest.approx(0.0, abs=1e-6)
    assert all(a < b for a, b in zip(values, values[1:]))


def test_method_fisher_is_non_negative_and_anchors_at_task_end():
    config = digits_config({"name": "ewc", "fisher_samples": 20})
    model = methods.build(config, (8, 8, 1), 10)
    rng = np.random.default_rng(3)
    x = rng.uniform(size=(30, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=30).astype(np.int32)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(10)
    model.on_task_begin(0, np.arange(10))
    model.on_task_end(0, dataset)
    importance = [v.numpy() for v in model.ewc.importance]
    assert all(np.all(f >= 0) for f in importance)
    assert sum(float(f.sum()) for f in importance) > 0
    for anchor, variable in zip(model.ewc.anchor, model.network.trainable_variables):
        # one task: the anchor is theta_0
        np.testing.assert_allclose(anchor.numpy(), variable.numpy(), rtol=1e-5, atol=1e-7)
    assert model.ewc.penalty(model.network.trainable_variables).numpy() == pytest.approx(0.0, abs=1e-6)


def test_step_descends_cross_entropy_plus_penalty():
    config = digits_config({"name": "ewc", "ewc_lambda": 3.0, "fisher_samples": 20})
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    rng = np.random.default_rng(4)
    x = rng.uniform(size=(20, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=20).astype(np.int32)
    model.on_task_begin(0, np.arange(10))
    model.on_task_end(0, tf.data.Dataset.from_tensor_slices((x, y)).batch(10))
    variables = model.network.trainable_variables
    for v in variables:  # move away from the anchor
        v.assign_add(0.05 * rng.normal(size=v.shape).astype(np.float32))
    model.on_task_begin(1, np.arange(10))
    xb, yb = tf.constant(x[:10]), tf.constant(y[:10])
    with tf.GradientTape() as tape:
        ce = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=model(xb)))
    grads = tape.gradient(ce, variables)
    expected = [
        v.numpy() - 0.1 * (g.numpy() + 3.0 * 2.0 * a.numpy() * (v.numpy() - m.numpy()))
        for v, g, a, m in zip(variables, grads, model.ewc.importance, model.ewc.anchor)
    ]
    logs = model.learn(xb, yb)
    assert float(logs["penalty"]) > 0
    for v, e in zip(variables, expected):
        np.testing.assert_allclose(v.numpy(), e, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_learns_permuted_digits(tmp_path):
    results = run(digits_config({"name": "ewc", "ewc_lambda": 10.0}), output_dir=str(tmp_path / "ewc"), verbose=0)
    assert results["acc"] > 35.0  # chance: 10%
    R = np.asarray(results["accuracy_matrix"])
    assert np.all(np.diag(R) > 40.0)


@pytest.mark.slow
def test_gem_fisher_option_runs(tmp_path):
    config = digits_config({"name": "ewc", "fisher": "squared_mean", "ewc_lambda": 100.0})
    results = run(config, output_dir=str(tmp_path / "sq"), verbose=0)
    assert results["acc"] > 35.0


@pytest.mark.slow
def test_zero_lambda_is_finetune(tmp_path):
    a = run(digits_config({"name": "ewc", "ewc_lambda": 0.0}), output_dir=str(tmp_path / "a"), verbose=0)
    b = run(digits_config({"name": "finetune"}), output_dir=str(tmp_path / "b"), verbose=0)
    np.testing.assert_allclose(a["accuracy_matrix"], b["accuracy_matrix"], atol=1e-4)
