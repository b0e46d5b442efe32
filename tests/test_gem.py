"""GEM: the in-graph dual QP against quadprog / scipy / brute force, the per-task memory, a run."""
import itertools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import quadprog
import tensorflow as tf
from scipy import optimize

from gcl_tf import methods
from gcl_tf.errors import ConfigError
from gcl_tf.memory import TaskMemory
from gcl_tf.methods import gem
from gcl_tf.train import run

from helpers import digits_config  # noqa: E402


def project2cone2(g, M, margin, eps=1e-3):
    """The GEM repository's projection (numpy + quadprog), the reference."""
    t = M.shape[0]
    P = M @ M.T
    P = 0.5 * (P + P.T) + np.eye(t) * eps
    q = -(M @ g)
    v = quadprog.solve_qp(P, q, np.eye(t), np.zeros(t) + margin)[0]
    return v @ M + g, v


_project = tf.function(gem.gem_project)


def random_problem(rng, T, P):
    t = int(rng.integers(1, T + 1))
    G = rng.normal(size=(T, P))
    G[:t] += rng.normal(size=P) * rng.uniform(0, 2)  # correlated task gradients
    g = rng.normal(size=P) - rng.uniform(0, 3) * G[:t].mean(axis=0)  # often conflicting
    return t, G, g


def test_projection_matches_quadprog_and_satisfies_the_constraints():
    rng = np.random.default_rng(0)
    for trial in range(60):
        T, P = 6, 40
        t, G, g = random_problem(rng, T, P)
        margin = [0.0, 0.1, 0.5, 1.0][trial % 4]
        valid = np.arange(T) < t
        expected, v = project2cone2(g, G[:t], margin)
        got = _project(tf.constant(g), tf.constant(G), tf.constant(valid), tf.constant(margin, tf.float64)).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-7 * np.abs(expected).max())
        dots = G[:t] @ got
        # KKT of the dual: G g~ = lambda - eps v >= -eps v
        assert np.all(dots >= -1e-3 * v - 1e-8 * np.abs(g).max()), (trial, dots)


def test_projection_in_float32_matches_quadprog():
    rng = np.random.default_rng(1)
    for _ in range(10):
        t, G, g = random_problem(rng, 5, 200)
        valid = np.arange(5) < t
        expected, _ = project2cone2(g.astype(np.float32).astype(np.float64),
                                    G[:t].astype(np.float32).astype(np.float64), 0.5)
        got = _project(tf.constant(g, tf.float32), tf.constant(G, tf.float32), tf.constant(valid), 0.5).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_zero_margin_is_the_euclidean_projection_onto_the_cone():
    """margin 0, eps 0: argmin ||z - g||^2 s.t. G z >= 0. Independent solution: z = g + G^T v with
    v = argmin_{v >= 0} ||G^T v + g|| (scipy's NNLS), and a check that no feasible point is closer."""
    rng = np.random.default_rng(2)
    for _ in range(20):
        T, P = 4, 12
        t, G, g = random_problem(rng, T, P)
        valid = np.arange(T) < t
        got = _project(tf.constant(g), tf.constant(G), tf.constant(valid), tf.constant(0.0, tf.float64), 0.0).numpy()
        v, _ = optimize.nnls(G[:t].T, -g)
        expected = g + G[:t].T @ v
        np.testing.assert_allclose(got, expected, atol=1e-8 * max(1.0, np.abs(g).max()))
        assert np.all(G[:t] @ got >= -1e-9 * np.abs(g).max())
        # optimality: random feasible points are never closer to g
        for _ in range(50):
            z = got + 0.1 * rng.normal(size=P)
            if np.all(G[:t] @ z >= 0):
                assert np.sum((z - g) ** 2) >= np.sum((got - g) ** 2) - 1e-12


def test_nonnegative_qp_matches_brute_force_over_active_sets():
    rng = np.random.default_rng(3)
    solve = tf.function(gem.nonnegative_qp)
    for trial in range(120):
        n = 5
        A = rng.normal(size=(n, 3 if trial % 2 else n + 2))  # low rank: needs the active set's step back
        Q = A @ A.T + 1e-2 * np.eye(n)
        c = rng.normal(size=n) * 3
        best, best_value = None, np.inf
        for size in range(n + 1):
            for free in itertools.combinations(range(n), size):
                u = np.zeros(n)
                if free:
                    idx = list(free)
                    u[idx] = np.linalg.solve(Q[np.ix_(idx, idx)], -c[idx])
                if np.all(u >= -1e-12):
                    value = 0.5 * u @ Q @ u + c @ u
                    if value < best_value:
                        best, best_value = u, value
        got = solve(tf.constant(Q), tf.constant(c)).numpy()
        np.testing.assert_allclose(got, best, atol=1e-9)


def test_no_conflict_leaves_the_gradient_unchanged_and_unseen_tasks_are_ignored():
    rng = np.random.default_rng(4)
    G = rng.normal(size=(4, 10))
    g = G[0] + G[1]  # dot products with tasks 0, 1 positive
    G[1] = G[0] * 0.5 + 0.1 * rng.normal(size=10)
    g = G[0] + G[1]
    assert np.all(G[:2] @ g > 0)
    valid = np.array([True, True, False, False])
    got = _project(tf.constant(g), tf.constant(G), tf.constant(valid), tf.constant(0.0, tf.float64), 0.0).numpy()
    np.testing.assert_allclose(got, g, atol=1e-12)
    # rows of tasks not seen yet do not matter
    G2 = G.copy()
    G2[2:] = 100 * rng.normal(size=(2, 10))
    h = -G[0]
    a = _project(tf.constant(h), tf.constant(G), tf.constant(valid), tf.constant(0.5, tf.float64)).numpy()
    b = _project(tf.constant(h), tf.constant(G2), tf.constant(valid), tf.constant(0.5, tf.float64)).numpy()
    np.testing.assert_allclose(a, b, atol=1e-12)


def test_task_memory_keeps_each_task_most_recent_samples():
    memory = TaskMemory(num_tasks=3, per_task=4, image_shape=(2,))
    for start in range(0, 9, 3):  # task 1 receives samples 0..8 in batches of 3
        x = np.arange(start, start + 3, dtype=np.float32)[:, None].repeat(2, axis=1)
        memory.add(1, x, np.arange(start, start + 3))
    assert memory.count.numpy().tolist() == [0, 4, 0]
    assert sorted(memory.labels.numpy()[1].tolist()) == [5, 6, 7, 8]
    np.testing.assert_array_equal(memory.images.numpy()[1][:, 0], memory.labels.numpy()[1])
    memory.add(0, np.zeros((6, 2), np.float32), np.arange(6))  # a batch larger than the buffer
    assert sorted(memory.labels.numpy()[0].tolist()) == [2, 3, 4, 5]
    assert memory.valid_before(1).numpy().reshape(3, 4).tolist() == [[True] * 4, [False] * 4, [False] * 4]


def test_step_applies_the_projected_gradient():
    """One past task, margin 0: the dual has the closed form v = -g.g0 / (g0.g0 + eps), so the
    applied gradient is g - (g.g0 / (g0.g0 + eps)) g0, almost orthogonal to g0."""
    config = digits_config({"name": "gem", "memory_size": 30, "margin": 0.0})
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    rng = np.random.default_rng(5)
    x = rng.uniform(size=(10, 8, 8, 1)).astype(np.float32)
    y0 = rng.integers(0, 10, size=10).astype(np.int32)
    model.on_task_begin(0, np.arange(10))
    model.learn(tf.constant(x), tf.constant(y0))
    model.on_task_begin(1, np.arange(10))
    y1 = ((y0 + 3) % 10).astype(np.int32)  # the same images with other labels: a conflict
    variables = model.network.trainable_variables
    g0 = model.memory_gradient(tf.constant(0)).numpy()
    with tf.GradientTape() as tape:
        loss = model.task_loss(tf.constant(x), tf.constant(y1), tf.constant(1))
    g = gem.flatten(tape.gradient(loss, variables), variables).numpy()
    assert g @ g0 < 0
    before = np.concatenate([v.numpy().ravel() for v in variables])
    logs = model.learn(tf.constant(x), tf.constant(y1))
    applied = -(np.concatenate([v.numpy().ravel() for v in variables]) - before) / 0.1  # SGD, lr 0.1
    assert float(logs["violations"]) == 1.0
    expected = g - (g @ g0) / (g0 @ g0 + gem.GEM_EPS) * g0
    np.testing.assert_allclose(applied, expected, atol=1e-5 * np.abs(expected).max())
    assert abs(applied @ g0) < 1e-2 * abs(g @ g0)


def test_past_gradients_are_the_memory_gradients_of_earlier_tasks_only():
    config = digits_config({"name": "gem", "memory_size": 30})
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    rng = np.random.default_rng(6)
    for task in range(3):
        model.on_task_begin(task, np.arange(10))
        x = rng.uniform(size=(10, 8, 8, 1)).astype(np.float32)
        model.learn(tf.constant(x), tf.constant(rng.integers(0, 10, size=10).astype(np.int32)))
    G = model.past_gradients(tf.constant(2)).numpy()
    assert G.shape == (3, model.num_parameters)
    for t in range(2):
        np.testing.assert_allclose(G[t], model.memory_gradient(tf.constant(t)).numpy(), rtol=1e-5, atol=1e-7)
        assert np.abs(G[t]).max() > 0
    assert np.all(G[2] == 0)


def test_multi_head_losses_only_see_the_task_classes():
    config = digits_config(
        {"name": "gem", "memory_size": 50},
        {"name": "split", "num_tasks": 5, "classes_per_task": 2, "samples_per_task": None, "multi_head": True},
    )
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    rng = np.random.default_rng(7)
    model.on_task_begin(0, np.array([0, 1]))
    model.learn(tf.constant(rng.uniform(size=(10, 8, 8, 1)).astype(np.float32)),
                tf.constant(rng.integers(0, 2, size=10).astype(np.int32)))
    model.on_task_begin(1, np.array([2, 3]))
    grads = gem.unflatten(model.memory_gradient(tf.constant(0)), model.network.trainable_variables)
    bias = grads[-1].numpy()  # output layer bias [10]
    assert np.all(bias[2:] == 0) and np.any(bias[:2] != 0)


@pytest.mark.slow
def test_learns_permuted_digits(tmp_path):
    results = run(digits_config({"name": "gem", "memory_size": 150}), output_dir=str(tmp_path / "gem"), verbose=0)
    assert results["acc"] > 40.0  # chance: 10%


@pytest.mark.slow
def test_multi_head_split_digits(tmp_path):
    config = digits_config(
        {"name": "gem", "memory_size": 100},
        {"name": "split", "num_tasks": 5, "classes_per_task": 2, "samples_per_task": None, "multi_head": True},
    )
    results = run(config, output_dir=str(tmp_path / "gem_mh"), verbose=0)
    assert results["acc"] > 85.0  # chance: 50% with two classes per task


def test_memory_too_small_for_the_tasks_is_a_config_error():
    with pytest.raises(ConfigError, match="memory_size"):
        methods.build(digits_config({"name": "gem", "memory_size": 2}), (8, 8, 1), 10)
