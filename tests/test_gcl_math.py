"""GCL's math against float64 NumPy and TensorFlow Probability, and the graph and memory rules of
docs/gcl.md (the regulariser, the stored edges, the best losses)."""
import dataclasses
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf
from gcl_harness import batches, make_model, tfd

from gcl_tf.methods.gcl import graph as gcl_graph
from gcl_tf.methods.gcl.config import Config as GCLConfig


# ----------------------------------------------------------------------------- pure math
def test_kernel_and_logit_of_exp_match_float64_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(7, 5)), rng.normal(size=(4, 5))
    log_scale = 0.7
    d2 = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    log_k = -0.5 * d2 / np.exp(log_scale)
    k = np.exp(log_k)
    expected_logits = np.log(k) - np.log1p(-k)
    got_log_k = gcl_graph.rbf_log_kernel(tf.constant(a, tf.float32), tf.constant(b, tf.float32), tf.constant(log_scale))
    got_logits = gcl_graph.edge_logits(tf.constant(a, tf.float32), tf.constant(b, tf.float32), tf.constant(log_scale))
    np.testing.assert_allclose(got_log_k.numpy(), log_k, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_logits.numpy(), expected_logits, rtol=1e-4, atol=1e-4)


def test_normalize_embeddings_puts_rows_on_the_unit_sphere_by_hand():
    """method.kernel: normalized: u / ||u|| (3-4-5: (0.6, 0.8)); an all-zero row stays 0 with
    finite gradients; the kernel on the sphere: ||(0.6, 0.8) - (1, 0)||^2 = 0.16 + 0.64 = 0.8
    = 2 - 2 cos (cos 0.6), so log k = -0.5 * 0.8 / exp(s) = -0.4 / 0.5 at width 0.5."""
    u = tf.constant([[3.0, 4.0], [0.0, 0.0], [10.0, 0.0]])
    with tf.GradientTape() as tape:
        tape.watch(u)
        unit = gcl_graph.normalize_embeddings(u)
        loss = tf.reduce_sum(unit * tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    np.testing.assert_allclose(unit.numpy(), [[0.6, 0.8], [0.0, 0.0], [1.0, 0.0]], rtol=1e-6)
    grad = tape.gradient(loss, u).numpy()
    assert np.all(np.isfinite(grad))
    # d(u/|u|)/du = (I - n n^T) / |u|: for (3, 4) and weights (1, 2): ((1, 2) - 2.2 (0.6, 0.8)) / 5
    np.testing.assert_allclose(grad[0], [(1 - 2.2 * 0.6) / 5, (2 - 2.2 * 0.8) / 5], rtol=1e-5)
    np.testing.assert_allclose(grad[2], [0.0, 0.6], rtol=1e-5, atol=1e-7)  # (5, 6) minus its radial part, / 10
    log_k = gcl_graph.rbf_log_kernel(unit[:1], unit[2:], tf.constant(math.log(0.5))).numpy()
    np.testing.assert_allclose(log_k, [[-0.4 / 0.5]], rtol=1e-5)
    # scaling a row leaves it unchanged: the kernel does not see the trunk's scale
    np.testing.assert_allclose(gcl_graph.normalize_embeddings(1000.0 * u).numpy(), unit.numpy(), rtol=1e-6)


def test_logit_of_exp_is_stable_at_both_ends():
    x = np.array([-1e-9, -1e-6, -1e-3, -0.5, -5.0, -80.0, -1e4], np.float64)
    got = gcl_graph.logit_of_exp(tf.constant(x, tf.float32)).numpy()
    assert np.all(np.isfinite(got))
    clipped = np.minimum(x, gcl_graph.LOG_KERNEL_MAX)
    expected = clipped - np.log(-np.expm1(clipped))
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    # near 0 the naive formula log(k) - log(1 - k) in float32 is infinite; ours is not
    assert got[0] == pytest.approx(-1e-6 - math.log(1e-6), rel=1e-3)


def test_relaxed_bernoulli_matches_tfp_and_has_finite_gradients():
    logits = tf.Variable(tf.constant([[-3.0, 0.0, 4.0, 13.8, 30.0]] * 200))
    seed = tf.constant([4, 2], tf.int32)
    for temperature in (0.1, 1.0, 5.0):
        with tf.GradientTape() as tape:
            ours = gcl_graph.sample_graph(logits, temperature, seed)
            total = tf.reduce_sum(ours * tf.range(1.0, 6.0))
        grad = tape.gradient(total, logits)
        reference = tfd.RelaxedBernoulli(temperature, logits=logits).sample(seed=seed)
        np.testing.assert_allclose(ours.numpy(), reference.numpy(), atol=1e-6)
        assert np.all(np.isfinite(grad.numpy())), temperature
    # TFP's own sample has NaN gradients where it saturates (why we sample in logit space)
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(tfd.RelaxedBernoulli(0.1, logits=logits).sample(seed=seed))
    assert np.any(np.isnan(tape.gradient(total, logits).numpy()))


def test_relaxed_bernoulli_samples_sharpen_as_temperature_falls():
    logits = tf.fill([20000], 0.8)
    seed = tf.constant([1, 1], tf.int32)
    sharpness = []
    for temperature in (10.0, 5.0, 1.0, 0.3, 0.1, 0.01):
        sample = gcl_graph.sample_graph(logits, temperature, seed).numpy()
        sharpness.append(np.mean(np.abs(sample - 0.5)))
        if temperature == 0.01:  # nearly Bernoulli(sigmoid(0.8))
            assert np.mean(sample > 0.5) == pytest.approx(1 / (1 + math.exp(-0.8)), abs=0.02)
    assert all(a < b for a, b in zip(sharpness, sharpness[1:])), sharpness
    # the mean of a relaxed sample is not the Bernoulli mean at high temperature, but the
    # deterministic ablation returns exactly sigmoid(logits)
    np.testing.assert_allclose(gcl_graph.sample_graph(logits, 5.0, seed, stochastic=False).numpy(),
                               tf.sigmoid(logits).numpy())


def test_normalize_rows_sums_to_one_and_respects_mask():
    graph = tf.constant(np.random.default_rng(0).random((5, 4)), tf.float32)
    mask = tf.constant(np.array([[0, 1, 1, 0]] * 4 + [[0, 0, 0, 0]], bool))
    out = gcl_graph.normalize_rows(graph, mask).numpy()
    np.testing.assert_allclose(out[:4].sum(1), 1.0, rtol=1e-6)
    assert np.all(out[:, [0, 3]] == 0)
    assert np.all(out[4] == 0)  # an all-masked row stays 0 (no NaN)


@pytest.mark.slow
def test_training_graph_rows_sum_to_one_and_context_diagonal_is_zero():
    model = make_model(context_temperature=0.1)
    for x, y in batches(2):  # 20 of 30 slots filled
        model.train_step((x, y))
    M = model.capacity
    log_k = tf.constant(-np.random.default_rng(1).exponential(size=(M + 10, M)), tf.float32)
    graph = model.training_graph(log_k, model.memory.filled(), tf.constant([7, 7], tf.int32)).numpy()
    filled = int(model.memory.num_filled.numpy())
    assert filled == 20
    np.testing.assert_allclose(graph[:filled].sum(1), 1.0, rtol=1e-5)  # context rows (G)
    np.testing.assert_allclose(graph[M:].sum(1), 1.0, rtol=1e-5)  # target rows (A)
    assert np.all(np.diag(graph[:M]) == 0)
    assert np.all(graph[:, filled:] == 0)  # empty slots are not attended to


# ----------------------------------------------------------------------------- graph loss
def test_graph_regularizer_zero_when_equal_positive_when_perturbed_and_masked():
    rng = np.random.default_rng(0)
    stored = tf.constant(rng.normal(size=(6, 6)) * 3, tf.float32)
    regularized = tf.constant([True, True, False, True, False, False])
    assert float(gcl_graph.graph_regularizer(stored, stored, regularized)) == pytest.approx(0.0, abs=1e-6)
    # perturbing a pair with both ends regularised raises the loss
    bump = np.zeros((6, 6), np.float32)
    bump[0, 3] = 2.0
    assert float(gcl_graph.graph_regularizer(stored + bump, stored, regularized)) > 1e-3
    # perturbing pairs with an unregularised end changes nothing
    other = np.zeros((6, 6), np.float32)
    other[2, :] = 5.0
    other[:, 4] = -5.0
    assert float(gcl_graph.graph_regularizer(stored + other, stored, regularized)) == pytest.approx(0.0, abs=1e-6)
    # a held context's pair with itself is held too (the whole block, as the authors); not without self-pairs
    diagonal = np.zeros((6, 6), np.float32)
    diagonal[0, 0] = 9.0
    assert float(gcl_graph.graph_regularizer(stored + diagonal, stored, regularized)) > 1e-3
    assert float(gcl_graph.graph_regularizer(stored + diagonal, stored, regularized, self_pairs=False)) == \
        pytest.approx(0.0, abs=1e-6)
    # one regularised context: only its self-pair, so 0 without self-pairs
    one = tf.constant([True, False, False, False, False, False])
    assert float(gcl_graph.graph_regularizer(stored + bump, stored, one, self_pairs=False)) == 0.0
    assert float(gcl_graph.graph_regularizer(stored + bump, stored, one)) == pytest.approx(0.0, abs=1e-6)
    # none regularised: 0
    assert float(gcl_graph.graph_regularizer(stored + diagonal, stored, tf.zeros([6], tf.bool))) == 0.0


@pytest.mark.parametrize("self_pairs", [True, False])
def test_graph_regularizer_is_the_mean_kl_over_regularized_pairs(self_pairs):
    """The mean over the held block (i, k both regularised): with the self-pairs (the default, the
    paper's p(G) over every i, k, the authors' mean) or over i != k only."""
    rng = np.random.default_rng(1)
    current, stored = rng.normal(size=(4, 4)), rng.normal(size=(4, 4))
    regularized = np.array([True, False, True, True])
    p, q = 1 / (1 + np.exp(-stored)), 1 / (1 + np.exp(-current))
    kl = p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))
    pairs = np.outer(regularized, regularized) & (True if self_pairs else ~np.eye(4, dtype=bool))
    assert pairs.sum() == (9 if self_pairs else 6)
    expected = kl[pairs].mean()
    got = gcl_graph.graph_regularizer(tf.constant(current, tf.float32), tf.constant(stored, tf.float32),
                                tf.constant(regularized), self_pairs=self_pairs)
    assert float(got) == pytest.approx(expected, rel=1e-4)
    if self_pairs:
        assert float(gcl_graph.graph_regularizer(tf.constant(current, tf.float32), tf.constant(stored, tf.float32),
                                           tf.constant(regularized))) == pytest.approx(expected, rel=1e-4)


def test_the_step_regularises_the_whole_held_block_by_default():
    """GCL's default (and the paper's, the authors'): the step's graph loss is the mean over the
    held block with the self-pairs, which add about 0 (a self-edge's logit is logit(1), clipped,
    both stored and current), so with m contexts held it is (m - 1) / m times the mean over i != k;
    ``regularize_self_pairs: false`` gives the latter."""
    assert GCLConfig().regularize_self_pairs is True and make_model().settings.regularize_self_pairs is True
    assert make_model(regularize_self_pairs=False).settings.regularize_self_pairs is False
    model = make_model(graph_lambda=50.0)
    for x, y in batches(6, seed=41):
        model.train_step((x, y))
    drift = np.random.default_rng(42).normal(0.0, 2.0, model.memory.edge_logits.shape).astype(np.float32)
    np.fill_diagonal(drift, 0.0)
    model.memory.edge_logits.assign_add(drift)  # the off-diagonal stored edges moved away
    x, y = next(batches(1, seed=43))
    losses = {}
    for self_pairs in (True, False):  # the same state, the same step
        model.settings = dataclasses.replace(model.settings, regularize_self_pairs=self_pairs)
        out = model.training_forward(x, y)
        held = int(tf.reduce_sum(tf.cast(out.edges.regularized, tf.int32)))
        losses[self_pairs] = (float(out.logs["graph_loss"]), held)
    (with_self, m), (without, m_) = losses[True], losses[False]
    assert m == m_ and m >= 2 and without > 1e-3
    assert with_self == pytest.approx(without * (m - 1) / m, rel=1e-3)


# ----------------------------------------------------------------------------- memory rules
def test_edge_memory_update_rules_on_a_hand_built_case():
    M, T = 4, 3
    stored = tf.constant(np.arange(16, dtype=np.float32).reshape(4, 4) + 100)  # 100..115
    all_logits = np.arange((M + T) ** 2, dtype=np.float32).reshape(M + T, M + T)
    all_logits = tf.constant(all_logits)  # entry (a, b) = 7a + b
    regularized = tf.constant([True, True, False, True])
    slots = tf.constant([3, -1, 1], tf.int32)  # target 0 -> slot 3, target 1 not kept, target 2 -> slot 1
    new = gcl_graph.update_edge_memory(stored, all_logits[:, :M], all_logits[:, M:], regularized, slots).numpy()
    cur = all_logits.numpy()
    # slots 0 and 2 survive; slot 1 holds target 2 (index 6), slot 3 holds target 0 (index 4)
    src = {0: 0, 1: 6, 2: 2, 3: 4}
    for i in range(4):
        for k in range(4):
            if i in (1, 3) or k in (1, 3):  # a new sample: current target logits
                assert new[i, k] == cur[src[i], src[k]], (i, k)
            elif i == 0 and k == 0:  # both survive and both regularised: stored kept
                assert new[i, k] == stored.numpy()[i, k]
            else:  # survivors with an end at a new low (slot 2 unregularised): current
                assert new[i, k] == cur[i, k], (i, k)
    assert new[1, 3] == cur[6, 4] and new[3, 1] == cur[4, 6]  # two new samples: target-target
    assert new[0, 3] == cur[0, 4]  # survivor-new: context-target logits


def test_replaced_source_index():
    source, replaced = gcl_graph.replaced_source_index(tf.constant([2, -1, 0], tf.int32), 4)
    assert source.numpy().tolist() == [4 + 2, 1, 4 + 0, 3]
    assert replaced.numpy().tolist() == [True, False, True, False]


@pytest.mark.slow
def test_best_loss_never_increases_and_resets_when_slot_replaced():
    model = make_model(memory_size=30)
    best_prev = None
    resets = 0
    for step, (x, y) in enumerate(batches(12, seed=4)):
        slots = model.memory.reservoir_slots(10).numpy()  # where this step's targets will go
        model.train_step((x, y))
        best = model.memory.best_loss.numpy()
        filled = int(model.memory.num_filled.numpy())
        if best_prev is not None:
            replaced = np.zeros(30, bool)
            replaced[slots[slots >= 0]] = True
            assert np.all(np.isinf(best[replaced])), step
            kept = ~replaced
            assert np.all(best[kept] <= best_prev[kept]), step
            resets += replaced[: min(filled, 30)].sum()
        if step >= 1:
            # every context that was in memory before the step now has a finite best loss
            before = min(10 * step, 30)
            assert np.all(np.isfinite(best[:before][~np.isin(np.arange(before), slots)]))
        best_prev = best
    assert resets > 0  # the stream was long enough to replace slots

