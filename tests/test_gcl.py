"""GCL: the math against float64 NumPy, the graph and memory rules of docs/gcl.md, the step."""
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from gcl_tf import config as config_lib
from gcl_tf import methods, salts
from gcl_tf.methods import gcl
from gcl_tf.methods.gcl import graph as gcl_graph

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


# ----------------------------------------------------------------------------- pure math
def test_kernel_and_logit_of_exp_match_float64_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(7, 5)), rng.normal(size=(4, 5))
    log_scale = 0.7
    d2 = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    log_k = -0.5 * d2 / np.exp(log_scale)
    k = np.exp(log_k)
    expected_logits = np.log(k) - np.log1p(-k)
    got_log_k = gcl.rbf_log_kernel(tf.constant(a, tf.float32), tf.constant(b, tf.float32), tf.constant(log_scale))
    got_logits = gcl.edge_logits(tf.constant(a, tf.float32), tf.constant(b, tf.float32), tf.constant(log_scale))
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
    log_k = gcl.rbf_log_kernel(unit[:1], unit[2:], tf.constant(math.log(0.5))).numpy()
    np.testing.assert_allclose(log_k, [[-0.4 / 0.5]], rtol=1e-5)
    # scaling a row leaves it unchanged: the kernel does not see the trunk's scale
    np.testing.assert_allclose(gcl_graph.normalize_embeddings(1000.0 * u).numpy(), unit.numpy(), rtol=1e-6)


def test_logit_of_exp_is_stable_at_both_ends():
    x = np.array([-1e-9, -1e-6, -1e-3, -0.5, -5.0, -80.0, -1e4], np.float64)
    got = gcl.logit_of_exp(tf.constant(x, tf.float32)).numpy()
    assert np.all(np.isfinite(got))
    clipped = np.minimum(x, gcl.LOG_KERNEL_MAX)
    expected = clipped - np.log(-np.expm1(clipped))
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    # near 0 the naive formula log(k) - log(1 - k) in float32 is infinite; ours is not
    assert got[0] == pytest.approx(-1e-6 - math.log(1e-6), rel=1e-3)


def test_relaxed_bernoulli_matches_tfp_and_has_finite_gradients():
    logits = tf.Variable(tf.constant([[-3.0, 0.0, 4.0, 13.8, 30.0]] * 200))
    seed = tf.constant([4, 2], tf.int32)
    for temperature in (0.1, 1.0, 5.0):
        with tf.GradientTape() as tape:
            ours = gcl.sample_graph(logits, temperature, seed)
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
        sample = gcl.sample_graph(logits, temperature, seed).numpy()
        sharpness.append(np.mean(np.abs(sample - 0.5)))
        if temperature == 0.01:  # nearly Bernoulli(sigmoid(0.8))
            assert np.mean(sample > 0.5) == pytest.approx(1 / (1 + math.exp(-0.8)), abs=0.02)
    assert all(a < b for a, b in zip(sharpness, sharpness[1:])), sharpness
    # the mean of a relaxed sample is not the Bernoulli mean at high temperature, but the
    # deterministic ablation returns exactly sigmoid(logits)
    np.testing.assert_allclose(gcl.sample_graph(logits, 5.0, seed, stochastic=False).numpy(),
                               tf.sigmoid(logits).numpy())


def test_normalize_rows_sums_to_one_and_respects_mask():
    graph = tf.constant(np.random.default_rng(0).random((5, 4)), tf.float32)
    mask = tf.constant(np.array([[0, 1, 1, 0]] * 4 + [[0, 0, 0, 0]], bool))
    out = gcl.normalize_rows(graph, mask).numpy()
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
    assert float(gcl.graph_regularizer(stored, stored, regularized)) == pytest.approx(0.0, abs=1e-6)
    # perturbing a pair with both ends regularised raises the loss
    bump = np.zeros((6, 6), np.float32)
    bump[0, 3] = 2.0
    assert float(gcl.graph_regularizer(stored + bump, stored, regularized)) > 1e-3
    # perturbing pairs with an unregularised end changes nothing
    other = np.zeros((6, 6), np.float32)
    other[2, :] = 5.0
    other[:, 4] = -5.0
    assert float(gcl.graph_regularizer(stored + other, stored, regularized)) == pytest.approx(0.0, abs=1e-6)
    # a held context's pair with itself is held too (the whole block, as the authors); not without self-pairs
    diagonal = np.zeros((6, 6), np.float32)
    diagonal[0, 0] = 9.0
    assert float(gcl.graph_regularizer(stored + diagonal, stored, regularized)) > 1e-3
    assert float(gcl.graph_regularizer(stored + diagonal, stored, regularized, self_pairs=False)) == \
        pytest.approx(0.0, abs=1e-6)
    # one regularised context: only its self-pair, so 0 without self-pairs
    one = tf.constant([True, False, False, False, False, False])
    assert float(gcl.graph_regularizer(stored + bump, stored, one, self_pairs=False)) == 0.0
    assert float(gcl.graph_regularizer(stored + bump, stored, one)) == pytest.approx(0.0, abs=1e-6)
    # none regularised: 0
    assert float(gcl.graph_regularizer(stored + diagonal, stored, tf.zeros([6], tf.bool))) == 0.0


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
    got = gcl.graph_regularizer(tf.constant(current, tf.float32), tf.constant(stored, tf.float32),
                                tf.constant(regularized), self_pairs=self_pairs)
    assert float(got) == pytest.approx(expected, rel=1e-4)
    if self_pairs:
        assert float(gcl.graph_regularizer(tf.constant(current, tf.float32), tf.constant(stored, tf.float32),
                                           tf.constant(regularized))) == pytest.approx(expected, rel=1e-4)


def test_the_step_regularises_the_whole_held_block_by_default():
    """GCL's default (and the paper's, the authors'): the step's graph loss is the mean over the
    held block with the self-pairs, which add about 0 (a self-edge's logit is logit(1), clipped,
    both stored and current), so with m contexts held it is (m - 1) / m times the mean over i != k;
    ``regularize_self_pairs: false`` gives the latter."""
    assert gcl.Config().regularize_self_pairs is True and make_model().regularize_self_pairs is True
    assert make_model(regularize_self_pairs=False).regularize_self_pairs is False
    model = make_model(graph_lambda=50.0)
    for x, y in batches(6, seed=41):
        model.train_step((x, y))
    drift = np.random.default_rng(42).normal(0.0, 2.0, model.memory.edge_logits.shape).astype(np.float32)
    np.fill_diagonal(drift, 0.0)
    model.memory.edge_logits.assign_add(drift)  # the off-diagonal stored edges moved away
    x, y = next(batches(1, seed=43))
    losses = {}
    for self_pairs in (True, False):  # the same state, the same step
        model.regularize_self_pairs = self_pairs
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
    new = gcl.update_edge_memory(stored, all_logits[:, :M], all_logits[:, M:], regularized, slots).numpy()
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
    source, replaced = gcl.replaced_source_index(tf.constant([2, -1, 0], tf.int32), 4)
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


def test_first_batch_only_fills_memory():
    model = make_model()
    weights = [w.numpy().copy() for w in model.trainable_variables]
    (x, y), = batches(1)
    logs = model.train_step((x, y))
    assert float(logs["loss"]) == 0.0
    assert int(model.memory.num_filled.numpy()) == 10
    assert int(model.optimizer.iterations.numpy()) == 0  # no optimizer step at all (the authors skip it)
    for before, w in zip(weights, model.trainable_variables):
        np.testing.assert_array_equal(before, w.numpy())
    # the stored edges between the first samples are their target-target logits
    u, _ = model.embed(x, training=False)
    expected = gcl.edge_logits(u, u, model.kernel_log_scale).numpy()
    stored = model.memory.edge_logits.numpy()[:10, :10]
    off = ~np.eye(10, dtype=bool)
    np.testing.assert_allclose(stored[off], expected[off], rtol=1e-3, atol=1e-3)


def test_the_first_update_after_the_fill_is_adams_step_one():
    """The fill-only first batch is no optimizer step: Adam's step count stays 0 and the next
    batch's update is Adam's step 1, lr g / (|g| + eps / sqrt(1 - beta_2)) for each weight (a step on
    the zero gradients first would make it Adam's step 2: about 0.74 lr g / |g|)."""
    model = make_model()  # Adam, learning rate 1e-3
    (x0, y0), (x1, y1) = batches(2, seed=5)
    model.train_step((x0, y0))
    assert int(model.optimizer.iterations.numpy()) == 0
    before = [w.numpy().copy() for w in model.trainable_variables]
    with tf.GradientTape() as tape:  # the step's own gradients: the same state, the same graph noise
        out = model.training_forward(x1, y1)
    grads = tape.gradient(out.replica_loss, model.trainable_variables)
    model.train_step((x1, y1))
    assert int(model.optimizer.iterations.numpy()) == 1
    optimizer = model.optimizer
    lr, eps = float(optimizer.learning_rate.numpy()), optimizer.epsilon / math.sqrt(1.0 - optimizer.beta_2)
    moved = 0
    for g, w0, w in zip(grads, before, model.trainable_variables):
        g = g.numpy()
        expected = -lr * g / (np.abs(g) + eps)
        np.testing.assert_allclose(w.numpy() - w0, expected, rtol=1e-3, atol=1e-6, err_msg=w.path)
        moved += int(np.sum(np.abs(g) > 1e-3))
    assert moved > 100  # most weights moved by about lr: Adam's first step


# ----------------------------------------------------------------------------- the step
def test_gradients_reach_every_trainable_variable():
    model = make_model(graph_lambda=50.0)
    for x, y in batches(4, seed=2):
        model.train_step((x, y))
    x, y = next(batches(1, seed=9))
    with tf.GradientTape() as tape:
        out = model.training_forward(x, y)
    grads = tape.gradient(out.logs["loss"], model.trainable_variables)
    names = [v.path for v in model.trainable_variables]
    assert any("kernel_log_scale" in n for n in names)
    for name, grad in zip(names, grads):
        assert grad is not None, name
        assert float(tf.reduce_max(tf.abs(grad))) > 0, name
    assert float(out.logs["graph_loss"]) > 0  # the regulariser is active in this state


@pytest.mark.parametrize("options", [{}, {"edge_memory": "embeddings", "context_batch": 12},
                                     {"kernel": "normalized", "kernel_width": "median"}])
@pytest.mark.slow
def test_train_step_does_not_retrace_across_steps_and_tasks(options):
    model = make_model(**options)
    traces = []
    original = model.learn

    def counting_learn(x, y):
        traces.append(1)
        return original(x, y)

    model.learn = counting_learn
    rng = np.random.default_rng(0)

    def dataset(seed):
        x = rng.random((60, 8, 8, 1)).astype(np.float32)
        y = rng.integers(0, 10, 60).astype(np.int32)
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(10, drop_remainder=True)

    model.fit(dataset(0), epochs=1, verbose=0, shuffle=False)
    first = len(traces)
    model.on_task_begin(1, np.arange(10))
    model.fit(dataset(1), epochs=2, verbose=0, shuffle=False)
    assert len(traces) == first == 1
    assert int(model.step_counter.numpy()) == 18


@pytest.mark.slow
def test_prediction_averages_samples_and_respects_class_mask():
    model = make_model(test_graph_samples=7)
    for x, y in batches(3, seed=5):
        model.train_step((x, y))
    x, _ = next(batches(1, seed=6))
    log_probs = model.predict_log_probs(x, tf.ones([10], tf.bool)).numpy()
    np.testing.assert_allclose(np.exp(log_probs).sum(1), 1.0, rtol=1e-5)
    mask = np.zeros(10, bool)
    mask[[2, 5]] = True
    masked = np.exp(model.predict_log_probs(x, tf.constant(mask)).numpy())
    assert np.all(masked[:, ~mask] < 1e-6)
    np.testing.assert_allclose(masked[:, mask].sum(1), 1.0, rtol=1e-5)
    # the average of S samples equals the mean of the per-sample distributions
    seed = tf.constant([3, 3], tf.int32)
    avg = np.exp(model.predict_log_probs(x, tf.ones([10], tf.bool), samples=7, seed=seed).numpy())
    assert avg.shape == (10, 10)
    single = np.exp(model.predict_log_probs(x, tf.ones([10], tf.bool), samples=1, seed=seed).numpy())
    assert not np.allclose(avg, single)  # stochastic graphs: more samples change the estimate
    det = make_model(stochastic_graphs=False, test_graph_samples=7)
    for xb, yb in batches(3, seed=5):
        det.train_step((xb, yb))
    a = det.predict_log_probs(x, tf.ones([10], tf.bool), seed=tf.constant([1, 1])).numpy()
    b = det.predict_log_probs(x, tf.ones([10], tf.bool), seed=tf.constant([2, 2])).numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5)  # deterministic graphs ignore the seed


@pytest.mark.slow
def test_same_seed_same_run_different_seed_differs():
    def run(seed):
        config = make_config()
        config.seed = seed
        model = methods.build(config, (8, 8, 1), 10)
        model.compile_for_training(config.train)
        for x, y in batches(5, seed=11):
            model.train_step((x, y))
        return [v.numpy() for v in model.trainable_variables] + [model.memory.edge_logits.numpy(),
                                                                 model.memory.best_loss.numpy()]

    import keras

    keras.utils.set_random_seed(0)
    a = run(3)
    keras.utils.set_random_seed(0)
    b = run(3)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    keras.utils.set_random_seed(0)
    c = run(4)
    assert not all(np.array_equal(u, v) for u, v in zip(a, c))


@pytest.mark.slow
def test_state_lives_in_checkpointed_variables(tmp_path):
    model = make_model()
    for x, y in batches(4, seed=1):
        model.train_step((x, y))
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    path = checkpoint.save(str(tmp_path / "ckpt"))
    names = [name for name, _ in tf.train.list_variables(path)]
    for part in ("memory/images", "memory/labels", "memory/best_loss", "memory/edge_logits",
                 "memory/num_seen", "memory/num_filled", "kernel_log_scale", "step_counter"):
        assert any(part in n for n in names), part


def test_aggregate_equals_normalised_graph_times_paper_values():
    """Z = normalise(graph) @ [l, LabelEncoder(one_hot(y))], computed from the raw graph through
    the narrower one-hot GEMM, with empty contexts, empty rows and (training) self-edges."""
    model = make_model()
    rng = np.random.default_rng(0)
    M, H = model.capacity, model.hidden_size
    model.label_encoder.bias.assign(rng.normal(size=H).astype(np.float32))  # a non-zero bias
    latents = tf.constant(rng.normal(size=(M, H)), tf.float32)
    labels = tf.constant(rng.integers(0, 10, M), tf.int32)
    valid = np.arange(M) < 25  # 5 empty slots
    paper_values = tf.concat([latents, model.label_encoder(tf.one_hot(labels, 10))], axis=-1)  # [M, 2H]
    values = model.context_values(latents, labels, tf.constant(valid))
    # test time: [S, N, M] graphs, no self-edges
    graph = rng.random((2, 7, M)).astype(np.float32)
    graph[0, 3, :25] = 0.0  # a row with no valid edge
    mask = np.broadcast_to(valid, graph.shape)
    expected = tf.reshape(tf.matmul(gcl.normalize_rows(tf.constant(graph), mask), paper_values), [-1, 2 * H]).numpy()
    got = model.aggregate(tf.constant(graph), values).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert np.all(got[3] == 0)
    # a sparse graph (tiny edges, one strong one) normalises without cancellation
    graph = np.full((4, M), 1e-9, np.float32)
    graph[np.arange(4), np.arange(4)] = 1.0
    mask = np.broadcast_to(valid, graph.shape)
    expected = tf.matmul(gcl.normalize_rows(tf.constant(graph), mask), paper_values).numpy()
    np.testing.assert_allclose(model.aggregate(tf.constant(graph), values).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_training_step_is_stable_when_graphs_are_sparse():
    """Contexts' self-edges are ~1 at low temperature: removing them must not cancel the other
    (tiny) edges. A learned, sparse graph (embeddings far apart) keeps the loss finite."""
    model = make_model(context_temperature=0.1, memory_size=30)
    for x, y in batches(3, seed=60):
        model.train_step((x, y))
    model.kernel_log_scale.assign(-8.0)  # every pair far apart: off-diagonal edges ~0
    x, y = next(batches(1, seed=61))
    out = model.training_forward(x, y)
    assert np.isfinite(float(out.logs["loss"]))
    assert float(out.logs["context_loss"]) < 50.0  # contexts with no neighbour predict from the biases only


def test_logit_of_exp_gradient_matches_finite_differences():
    x = tf.constant(np.linspace(-20.0, -0.1, 50), tf.float64)

    def f(v):
        return gcl.logit_of_exp(v)

    theoretical, numerical = tf.test.compute_gradient(f, [x])
    np.testing.assert_allclose(theoretical[0], numerical[0], rtol=1e-4, atol=1e-6)
    near = tf.constant([-1e-4, -0.01], tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(near)
        y = gcl.logit_of_exp(near)
    np.testing.assert_allclose(tape.gradient(y, near).numpy(), 1.0 / (1.0 - np.exp([-1e-4, -0.01])), rtol=1e-9)
    with tf.GradientTape() as tape:
        clipped = tf.constant([0.0, 1e-9, 0.5], tf.float64)
        tape.watch(clipped)
        y = gcl.logit_of_exp(clipped)
    assert np.all(tape.gradient(y, clipped).numpy() == 0)  # clipped: no gradient


def test_fixed_shape_step_equals_the_dynamic_shape_formulation():
    """The masked [M, ...] step computes what a straightforward step on the C filled contexts
    computes (deterministic graphs so that no noise is involved): loss and gradients."""
    model = make_model(stochastic_graphs=False, graph_lambda=7.0, context_lambda=0.6, **PAPER_HEAD)
    for x, y in batches(2, seed=21):  # 20 of 30 slots filled
        model.train_step((x, y))
    x, y = next(batches(1, seed=22))
    with tf.GradientTape() as tape:
        out = model.training_forward(x, y)
    grads = tape.gradient(out.logs["loss"], model.trainable_variables)

    C = int(model.memory.num_filled.numpy())
    context_x, context_y = model.memory.images[:C], model.memory.labels[:C]
    best, stored = model.memory.best_loss[:C], model.memory.edge_logits[:C, :C]
    with tf.GradientTape() as tape:
        u, latents = model.embed(tf.concat([context_x, x], 0), training=True)
        e = gcl.edge_logits(u, u[:C], model.kernel_log_scale)  # [C + T, C]
        g = tf.sigmoid(e) * (1.0 - tf.eye(C + 10, C))
        g = g / tf.reduce_sum(g, axis=1, keepdims=True)
        values = tf.concat([latents[:C], model.label_encoder(tf.one_hot(context_y, 10))], axis=1)
        logits = model.output_head(tf.nn.relu(g @ values))
        ce_c = gcl.cross_entropy(context_y, logits[:C])
        ce_t = gcl.cross_entropy(y, logits[C:])
        m = (best < ce_c).numpy()
        pairs = np.outer(m, m)  # the held block, self-pairs included (the default)
        p, q_logits = tf.sigmoid(stored), tf.boolean_mask(e[:C], pairs)
        p = tf.boolean_mask(p, pairs)
        kl = tf.nn.sigmoid_cross_entropy_with_logits(labels=p, logits=q_logits) - \
            tf.nn.sigmoid_cross_entropy_with_logits(labels=p, logits=tf.boolean_mask(stored, pairs))
        graph_loss = tf.reduce_mean(kl) if pairs.any() else 0.0
        loss = tf.reduce_mean(ce_t) + 0.6 * tf.reduce_mean(ce_c) + 7.0 * graph_loss
    ref_grads = tape.gradient(loss, model.trainable_variables)
    assert pairs.any()
    assert float(out.logs["loss"]) == pytest.approx(float(loss), rel=1e-5)
    # the KL is a difference of two cross-entropies of order 1: float32 resolves it to ~1e-7
    assert float(out.logs["graph_loss"]) == pytest.approx(float(graph_loss), rel=1e-4, abs=5e-7)
    for a, b, v in zip(grads, ref_grads, model.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-3, atol=2e-6, err_msg=v.path)


@pytest.mark.slow
def test_xla_fused_regularizer_gives_the_plain_step():
    """method.fuse_regularizer (the regulariser compiled by XLA) changes nothing but rounding:
    the same losses and gradients as plain TensorFlow ops, with regularised pairs present."""
    model = make_model(graph_lambda=50.0)
    for x, y in batches(8, seed=31):
        model.train_step((x, y))
    x, y = next(batches(1, seed=32))
    drift = np.random.default_rng(33).normal(0.0, 2.0, model.memory.edge_logits.shape).astype(np.float32)
    model.memory.edge_logits.assign_add(drift)  # stored edges the current ones have moved away from
    results = []
    for fused in (True, False):
        model.fuse_regularizer = fused
        with tf.GradientTape() as tape:
            out = model.training_forward(x, y)
        results.append((out, tape.gradient(out.logs["loss"], model.trainable_variables)))
    (fused_out, fused_grads), (plain_out, plain_grads) = results
    assert float(plain_out.logs["regularized_fraction"]) > 0.2 and float(plain_out.logs["graph_loss"]) > 1e-3
    for name in ("loss", "graph_loss"):
        assert float(fused_out.logs[name]) == pytest.approx(float(plain_out.logs[name]), rel=1e-4)
    for a, b, v in zip(fused_grads, plain_grads, model.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-6, err_msg=v.path)


# ----------------------------------------------------------------------------- large memories
def test_large_memory_options_are_validated():
    from gcl_tf.errors import ConfigError

    with pytest.raises(ConfigError, match="method.context_batch: needs method.edge_memory: embeddings"):
        make_config(context_batch=8)
    with pytest.raises(ConfigError, match="more than method.memory_size"):
        make_config(context_batch=31, edge_memory="embeddings")
    with pytest.raises(ConfigError, match="method.edge_memory"):
        make_config(edge_memory="list")
    config = make_config(context_batch=8, edge_memory="embeddings")
    assert config.method.context_batch == 8


def test_embedding_edge_memory_stores_embeddings_with_the_matrix_rules():
    model = make_model(edge_memory="embeddings")
    assert not hasattr(model.memory, "edge_logits")
    assert tuple(model.memory.edge_embeddings.shape) == (30, 16)
    (x, y), = batches(1, seed=30)
    u, _ = model.embed(x, training=True)
    model.train_step((x, y))  # first batch: the targets' own embeddings are stored
    np.testing.assert_allclose(model.memory.edge_embeddings[:10].numpy(), u.numpy(), rtol=1e-5, atol=1e-6)
    # the rule, on a hand-built case: contexts at a new low refresh, regularised ones keep theirs,
    # new samples store their own embedding
    before = model.memory.edge_embeddings.numpy().copy()
    k = 4
    slots = tf.constant([0, 1, 2, 3], tf.int32)
    valid = tf.constant([True, True, True, False])
    regularized = tf.constant([True, False, False, False])
    embeddings = tf.constant(np.arange((k + 10) * 16, dtype=np.float32).reshape(k + 10, 16))
    new_slots = tf.constant([2, -1, 12, -1, -1, -1, -1, -1, -1, -1], tf.int32)
    model._update_edge_embeddings(embeddings, slots, valid, regularized, new_slots)
    after = model.memory.edge_embeddings.numpy()
    e = embeddings.numpy()
    np.testing.assert_array_equal(after[0], before[0])  # regularised: kept
    np.testing.assert_array_equal(after[1], e[1])  # at a new low: refreshed
    np.testing.assert_array_equal(after[2], e[k + 0])  # replaced by target 0 (wins over the refresh)
    np.testing.assert_array_equal(after[3], before[3])  # invalid context: untouched
    np.testing.assert_array_equal(after[12], e[k + 2])  # target 2
    # stored logits come from the stored embeddings; 0 regulariser when they equal the current ones
    stored = model.stored_edge_logits(slots).numpy()
    s = after[:4]
    expected = gcl.edge_logits(tf.constant(s), tf.constant(s), model.kernel_log_scale).numpy()
    np.testing.assert_allclose(stored, expected, rtol=1e-5)
    assert float(gcl.graph_regularizer(tf.constant(expected), tf.constant(stored), tf.ones([4], tf.bool))) == \
        pytest.approx(0.0, abs=1e-6)


@pytest.mark.slow
def test_context_batch_attends_to_k_distinct_filled_slots():
    model = make_model(edge_memory="embeddings", context_batch=8, memory_size=30)
    for x, y in batches(2, seed=40):  # 20 filled
        model.train_step((x, y))
    seen = set()
    for step, (x, y) in enumerate(batches(6, seed=41)):
        slots, valid = model.select_contexts()
        s = slots.numpy()
        assert valid.numpy().all() and len(set(s)) == 8
        assert np.all(s < int(model.memory.num_filled.numpy()))
        seen.update(s.tolist())
        with tf.GradientTape():
            out = model.training_forward(x, y, slots, valid)
        # the step never touches all M
        assert tuple(out.edges.to_contexts.shape) == (8 + 10, 8) and tuple(out.edges.to_targets.shape) == (8 + 10, 10)
        best_before = model.memory.best_loss.numpy().copy()
        new_slots = model.memory.reservoir_slots(10).numpy()
        model.train_step((x, y))
        best = model.memory.best_loss.numpy()
        untouched = np.setdiff1d(np.arange(30), np.concatenate([s, new_slots[new_slots >= 0]]))
        np.testing.assert_array_equal(best[untouched], best_before[untouched])  # only attended slots change
        assert np.all(np.isfinite(best[np.setdiff1d(s, new_slots)]))
    assert len(seen) > 8  # different contexts on different steps


def test_context_batch_during_fill_masks_missing_contexts():
    model = make_model(edge_memory="embeddings", context_batch=16, memory_size=30)
    (x, y), = batches(1, seed=50)
    model.train_step((x, y))  # 10 filled < 16 drawn
    slots, valid = model.select_contexts()
    assert valid.numpy().sum() == 10 and valid.numpy()[:10].all()
    images = model.context_images(slots, valid).numpy()
    stored = model.memory.images.numpy()[:10]
    for image in images:  # every image fed to the trunk is a real stored one
        assert any(np.array_equal(image, s) for s in stored)
    logs = model.train_step(next(batches(1, seed=51)))
    assert np.isfinite(float(logs["loss"])) and float(logs["loss"]) > 0
    assert np.all(np.isinf(model.memory.best_loss.numpy()[20:]))  # empty slots have no loss yet


@pytest.mark.slow
def test_test_noise_is_drawn_once_per_evaluation_and_predictions_are_unchanged(tmp_path):
    """The cached test-time noise gives exactly the per-batch draws, is redrawn when the training
    step (the seed) moves, and is not part of a checkpoint."""
    config = make_config(test_graph_samples=5)
    config.eval.batch_size = 10
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    assert model._test_noise is not None and model._test_noise.shape == (5, 10, 30)
    mask = tf.ones([10], tf.bool)
    predict = tf.function(lambda x: model.predict_log_probs(x, mask))
    tests = [x for x, _ in batches(2, seed=8)]

    def uncached():
        cache, model._test_noise = model._test_noise, None
        try:
            return [model.predict_log_probs(x, mask).numpy() for x in tests]
        finally:
            model._test_noise = cache

    for round_ in range(2):  # after the first task and again after more training
        for x, y in batches(4, seed=round_):
            model.train_step((x, y))
        seed = gcl.step_seed(model.seed, model.step_counter, salts.TEST_GRAPH).numpy()
        got = [predict(x).numpy() for x in tests]
        np.testing.assert_array_equal(model._test_noise.seed.numpy(), seed)  # redrawn for this step
        for a, b in zip(got, uncached()):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    names = [name for name, _ in tf.train.list_variables(checkpoint.save(str(tmp_path / "ckpt")))]
    assert not any("test_noise" in n for n in names)
    big = make_config(test_graph_samples=30, memory_size=20000, edge_memory="embeddings")  # 30x500x20000 floats
    assert methods.build(big, (8, 8, 1), 10)._test_noise is None


@pytest.mark.slow
def test_memory_contexts_are_computed_once_per_evaluation_scope(tmp_path):
    """Inside model.evaluation_scope() the memory's embeddings are computed at the first test batch
    and reused (predictions identical to uncached ones); leaving the scope drops them, and outside
    a scope a change of the memory shows at once. Not part of a checkpoint."""
    model = make_model(test_graph_samples=3)
    for x, y in batches(4, seed=12):
        model.train_step((x, y))
    mask = tf.ones([10], tf.bool)
    predict = tf.function(lambda x: model.predict_log_probs(x, mask))
    tests = [x for x, _ in batches(3, seed=13)]
    fresh = [predict(x).numpy() for x in tests]  # outside a scope
    with model.evaluation_scope():
        np.testing.assert_array_equal(predict(tests[0]).numpy(), fresh[0])
        images = model.memory.images.read_value()
        model.memory.images.assign(images[::-1])  # not allowed in a scope: shows the reuse
        for x, want in zip(tests[1:], fresh[1:]):
            np.testing.assert_array_equal(predict(x).numpy(), want)  # the contexts of the first batch
    changed = predict(tests[1]).numpy()  # outside: the changed memory, at once
    assert np.abs(changed - fresh[1]).max() > 1e-4
    model.memory.images.assign(images)  # and again
    np.testing.assert_array_equal(predict(tests[1]).numpy(), fresh[1])
    model.memory.images.assign(images[::-1])
    with model.evaluation_scope():  # a new scope computes afresh
        np.testing.assert_array_equal(predict(tests[1]).numpy(), changed)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    names = [name for name, _ in tf.train.list_variables(checkpoint.save(str(tmp_path / "ckpt")))]
    assert not any("context" in n for n in names)


def test_prediction_is_the_mean_of_the_per_sample_distributions():
    """predict_log_probs with S samples equals averaging S explicit graph samples drawn with the
    same noise, each aggregated and classified on its own."""
    model = make_model(test_graph_samples=4, **PAPER_HEAD)
    for x, y in batches(4, seed=2):
        model.train_step((x, y))
    x, _ = next(batches(1, seed=9))
    seed = tf.constant([5, 7], tf.int32)
    got = np.exp(model.predict_log_probs(x, tf.ones([10], tf.bool), samples=4, seed=seed).numpy())
    u_c, l_c = model.embed(model.memory.images, training=False)
    u_t, _ = model.embed(x, training=False)
    values = model.context_values(l_c, model.memory.labels, model.memory.filled())
    logits_e = gcl.edge_logits(u_t, u_c, model.kernel_log_scale)
    noise = gcl.logistic_noise(tf.concat([[4], tf.shape(logits_e)], 0), seed)
    temperature = model.test_temperature
    probs = [tf.nn.softmax(model.classify(gcl.relaxed_bernoulli(logits_e, temperature, noise[s]), values)).numpy()
             for s in range(4)]
    np.testing.assert_allclose(got, np.mean(probs, axis=0), rtol=1e-4, atol=1e-6)
    assert not np.allclose(probs[0], probs[1], atol=1e-3)  # the samples differ


# ----------------------------------------------------------------------------- cold start
def test_regularized_contexts_paper_rule_and_learned_threshold():
    valid = tf.constant([True, True, True, True, False])
    best = tf.constant([0.2, 0.2, 1.5, 1.5, 0.1])
    current = tf.constant([0.1, 0.9, 1.0, 2.0, 3.0])
    paper = gcl.regularized_contexts(valid, best, current).numpy()
    np.testing.assert_array_equal(paper, [False, True, False, True, False])  # worse than the best, valid
    learned = gcl.regularized_contexts(valid, best, current, regularize_below=0.5).numpy()
    np.testing.assert_array_equal(learned, [False, True, False, False, False])  # and best below 0.5


def test_regularize_below_holds_no_edges_of_contexts_never_learned():
    """On noise (every context loss stays near log 10 > 0.5) the paper's rule regularises many
    contexts and keeps their stored edges; with regularize_below 0.5 none is held: the graph loss
    is 0, so no near-initial edge snapshot is held (the cold start)."""
    fractions = {}
    for threshold in (None, 0.5):
        model = make_model(graph_lambda=50.0, regularize_below=threshold, memory_size=20)
        logs = [model.train_step(batch) for batch in batches(12, seed=3)]
        fractions[threshold] = max(float(log["regularized_fraction"]) for log in logs[1:])
        if threshold is not None:
            assert all(float(log["graph_loss"]) == 0.0 for log in logs)
            # the threshold did the work: every context attended to has a best loss, none below 0.5
            # (not vacuous: a slot never attended to keeps +inf, above any threshold)
            best = model.memory.best_loss.numpy()[model.memory.filled().numpy()]
            attended = best[np.isfinite(best)]
            assert len(attended) >= 10 and attended.min() >= 0.5, best
    assert fractions[None] > 0.2 and fractions[0.5] == 0.0


def test_kernel_width_sets_the_initial_kernel_scale():
    """log k = -0.5 d^2 / exp(s): s starts at log kernel_width or, with null, log sqrt(H) (the authors)."""
    authors, default, narrow = make_model(), make_model(kernel_width=1.0), make_model(kernel_width=0.5)
    hidden = authors.hidden_size
    assert float(authors.kernel_log_scale) == pytest.approx(math.log(math.sqrt(hidden)))
    assert float(default.kernel_log_scale) == pytest.approx(0.0)
    assert float(narrow.kernel_log_scale) == pytest.approx(math.log(0.5))
    u = tf.constant([[0.0, 0.0], [1.0, 1.0]])
    log_k = gcl.rbf_log_kernel(u, u, narrow.kernel_log_scale).numpy()
    assert log_k[0, 1] == pytest.approx(-0.5 * 2.0 / 0.5, rel=1e-5)


def test_our_extensions_are_the_defaults_and_null_is_the_paper():
    """Config nulls give the paper's GCL, as built from a config: the kernel starts at the authors'
    width sqrt(H), and every context whose loss rose above its best is held by the regulariser
    (best losses above 1, which the default threshold would leave out); the defaults differ in both
    (the width: set from the contexts' median distance at the first step with contexts)."""
    defaults = gcl.Config()
    assert (defaults.regularize_below, defaults.kernel_width, defaults.kernel_start_edge) == (1.0, "median", 0.1)
    held = {}
    for name, method in (("paper", {"regularize_below": None, "kernel_width": None}), ("ours", {})):
        config = config_lib.resolve({"seed": 3, "method": {"name": "gcl", "memory_size": 30, **method},
                                     "model": {"backbone": "mlp", "hidden_size": 16}})
        model = methods.build(config, (8, 8, 1), 10)
        model.compile_for_training(config.train)
        assert math.exp(float(model.kernel_log_scale)) == pytest.approx(math.sqrt(16), rel=1e-6)
        assert model.width_from_median == (name == "ours")
        for x, y in batches(2, seed=51):
            model.train_step((x, y))
        assert bool(model.kernel_width_set.numpy()) == (name == "ours")
        # contexts learned badly so far: best losses between 1.5 and 2, below the current ones
        filled = model.memory.filled().numpy()
        model.memory.best_loss.assign(np.where(filled, 1.5 + 0.5 * np.arange(30) / 30, np.inf).astype(np.float32))
        x, y = next(batches(1, seed=52))
        out = model.training_forward(x, y)
        worse = (out.edges.context_ce.numpy() > model.memory.best_loss.numpy()) & filled
        assert worse.sum() >= 5  # contexts whose loss rose above their best
        held[name] = out.edges.regularized.numpy()
        np.testing.assert_array_equal(held[name], worse if name == "paper" else np.zeros(30, bool))


@pytest.mark.slow
def test_one_run_evaluates_with_one_test_graph_sample_too_exactly_as_a_run_of_its_own(tmp_path, monkeypatch):
    """also_test_graph_samples: [1] gives, in the same run, the accuracy matrix a run with
    test_graph_samples: 1 gives (training does not depend on it), kept across a resume."""
    import os
    import signal

    from gcl_tf import callbacks, train
    from gcl_tf.errors import Stopped

    from helpers import digits_config

    def config(**method):
        return digits_config({"name": "gcl", "memory_size": 50, **method},
                             benchmark={"num_tasks": 2, "samples_per_task": 100})

    both = train.run(config(also_test_graph_samples=[1]), str(tmp_path / "both"), verbose=0)
    alone = train.run(config(test_graph_samples=1), str(tmp_path / "alone"), verbose=0)
    one = both["evaluations"]["one_sample"]
    assert one["settings"] == {"test_graph_samples": 1}
    assert one["accuracy_matrix"] == alone["accuracy_matrix"] and one["acc"] == alone["acc"]
    assert both["accuracy_matrix"] != one["accuracy_matrix"]  # 30 samples differ from one
    assert "evaluations" in alone and alone["evaluations"] == {}

    # SIGTERM in task 2 and resumed: task 1's one-sample row comes back from the checkpoint.
    after_batch = callbacks.PeriodicCheckpoint.on_train_batch_end

    def sigterm_at_step_13(self, batch, logs=None):
        if self.step + self._per_call == 13:
            os.kill(os.getpid(), signal.SIGTERM)
        return after_batch(self, batch, logs)

    with monkeypatch.context() as patch:
        patch.setattr(callbacks.PeriodicCheckpoint, "on_train_batch_end", sigterm_at_step_13)
        with pytest.raises(Stopped):
            train.run(config(also_test_graph_samples=[1]), str(tmp_path / "resumed"), verbose=0)
    resumed = train.run(config(also_test_graph_samples=[1]), str(tmp_path / "resumed"), verbose=0, resume=True)
    assert resumed["resumed_from_step"] == 13
    assert resumed["evaluations"] == both["evaluations"] and resumed["accuracy_matrix"] == both["accuracy_matrix"]


def test_the_fill_only_first_batch_is_no_optimizer_step():
    """As in the authors' code: the first batch only fills the memory: weights, Adam's moments
    and its step count are as before it, so the first real update is Adam's step 1."""
    import keras

    import gcl_tf

    keras.utils.set_random_seed(0)
    # a fixed width: the default's is set (not stepped) at the first step with contexts
    model = gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), memory_size=20, hidden_size=16, kernel_width=1.0)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    rng = np.random.default_rng(0)
    x, y = rng.random((30, 8, 8, 1), dtype=np.float32), np.arange(30) % 10
    stream = tf.data.Dataset.from_tensor_slices((x, y)).batch(10)
    model.fit(stream.take(1), verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 0
    assert all(not np.any(v.numpy()) for v in model.optimizer.variables[2:])  # moments still zero
    before = [v.numpy().copy() for v in model.trainable_variables]
    model.fit(stream.skip(1).take(1), verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 1
    # Adam's step 1 moves every weight with a gradient by about lr (m_hat / sqrt(v_hat) = +-1).
    moved = np.concatenate([np.abs(v.numpy() - b).ravel() for v, b in zip(model.trainable_variables, before)])
    assert np.isclose(np.max(moved), 1e-3, rtol=1e-3)


def _small_gcl(**keys):
    import keras

    import gcl_tf

    keras.utils.set_random_seed(0)
    model = gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), memory_size=20, hidden_size=16, **keys)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    rng = np.random.default_rng(0)
    x, y = rng.random((40, 8, 8, 1), dtype=np.float32), np.arange(40) % 10
    return model, tf.data.Dataset.from_tensor_slices((x, y)).batch(10)


@pytest.mark.parametrize("edge", [None, math.exp(-0.5)])
def test_median_kernel_width_is_set_once_from_the_contexts_median_squared_distance(edge):
    """kernel_width: median: at the first step with contexts, exp(s) becomes the width at which a
    pair at the median of ||u_i - u_j||^2 over the pairs of contexts (embedded with the weights that
    step starts from) has edge probability kernel_start_edge (default 0.1; exp(-1/2): the median
    itself); later steps only move it by Adam's updates."""
    keys = {} if edge is None else {"kernel_start_edge": edge}
    model, stream = _small_gcl(**keys)  # the default width is the median one
    assert np.isclose(np.exp(model.kernel_log_scale.numpy()), 4.0)  # sqrt(H) until then
    model.fit(stream.take(1), verbose=0)  # fills the memory: 10 contexts
    assert not bool(model.kernel_width_set.numpy())
    u, _ = model.embed(model.memory.images[:10], training=False)  # the MLP: no BatchNorm, no dropout
    d2 = np.square(u.numpy()[:, None, :] - u.numpy()[None, :, :]).sum(-1)
    median = np.median(d2[~np.eye(10, dtype=bool)])
    model.fit(stream.skip(1).take(1), verbose=0)
    assert bool(model.kernel_width_set.numpy())
    set_to = model.kernel_log_scale.numpy()
    np.testing.assert_allclose(np.exp(-0.5 * median / np.exp(set_to)), 0.1 if edge is None else edge, rtol=1e-4)
    if edge is not None:
        np.testing.assert_allclose(np.exp(set_to), median, rtol=1e-4)
    model.fit(stream.skip(2).take(2), verbose=0)  # two more Adam steps of lr 1e-3 on s, not a reset
    assert 0 < abs(model.kernel_log_scale.numpy() - set_to) <= 2.1e-3


@pytest.mark.parametrize("edge_memory", ["matrix", "embeddings"])
def test_the_normalized_kernel_compares_unit_embeddings_whatever_their_scale(edge_memory, tmp_path):
    """kernel: normalized: every edge embedding the step, the memory and prediction use has norm 1,
    the median width is set from their squared distances (in [0, 4]), and the test-time edges do
    not change when the edge head's output is scaled (with kernel: rbf they do). It is a saved
    keyword: a loaded learner keeps it and predicts the same."""
    import gcl_tf

    model, stream = _small_gcl(kernel="normalized", edge_memory=edge_memory)
    assert gcl.Config().kernel == "rbf"  # the paper's kernel stays the default
    model.fit(stream, verbose=0)
    x = next(iter(stream))[0]
    u, _ = model.embed(x, training=False)
    np.testing.assert_allclose(np.linalg.norm(u.numpy(), axis=1), 1.0, rtol=1e-5)
    u_step, _ = model.embed_step(model.memory.images[:20], x)
    np.testing.assert_allclose(np.linalg.norm(u_step.numpy(), axis=1), 1.0, rtol=1e-5)
    if edge_memory == "embeddings":
        np.testing.assert_allclose(np.linalg.norm(model.memory.edge_embeddings.numpy(), axis=1), 1.0, rtol=1e-5)
    # the width was set from a median squared distance on the sphere: 0 < d2 <= 4
    assert bool(model.kernel_width_set.numpy())
    width = float(np.exp(model.kernel_log_scale.numpy()))
    assert 0 < width <= 4.0 / (-2 * math.log(0.1)) * 1.01
    logits = model.test_graphs(x, samples=1, seed=(1, 2))[0].numpy()
    path = str(tmp_path / "learner.keras")
    model.save(path)
    loaded = gcl_tf.load_model(path)
    assert loaded.kernel_type == "normalized" and loaded.get_config()["kernel"] == "normalized"
    np.testing.assert_array_equal(loaded.test_graphs(x, samples=1, seed=(1, 2))[0].numpy(), logits)
    for scaled, kernel in ((model, "normalized"), (_small_gcl()[0], "rbf")):
        if kernel == "rbf":
            scaled.fit(stream, verbose=0)
        before = scaled.test_graphs(x, samples=1, seed=(1, 2))[0].numpy()
        head = scaled.edge_head
        head.kernel.assign(head.kernel * 10.0)
        head.bias.assign(head.bias * 10.0)
        after = scaled.test_graphs(x, samples=1, seed=(1, 2))[0].numpy()
        if kernel == "normalized":
            np.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-4)
        else:
            assert np.max(np.abs(after - before)) > 1.0


def test_neighbourhoods_tell_rows_that_reach_nothing_from_rows_that_reach_everything_alike():
    from gcl_tf.methods.gcl.graph import neighbourhoods

    graph = np.array([[1e-8, 1e-8, 1e-8, 1e-8],  # (almost) no edge: sums below 1e-6
                      [0.5, 0.5, 0.5, 0.5],  # every memory image alike: 4 of 4 effective neighbours
                      [1e-3, 1e-12, 1e-12, 1e-12],  # small but one clear neighbour: 1 of 4
                      [0.9, 0.9, 0.0, 0.0]])  # 2 of 4
    no_edge, spread = neighbourhoods(graph)
    assert no_edge == 0.25
    np.testing.assert_allclose(spread, np.median([4.0, 4.0, 1.0, 2.0]) / 4, rtol=1e-6)
    np.testing.assert_allclose(neighbourhoods(np.full((3, 5), 0.2)), (0.0, 1.0))
    assert neighbourhoods(np.full((3, 5), 1e-9))[0] == 1.0


def test_a_task_learned_at_chance_because_of_the_kernel_is_named_in_one_line(capsys):
    model, stream = _small_gcl()
    model.fit(stream.take(3), verbose=0)
    images = np.random.default_rng(1).random((30, 8, 8, 1), dtype=np.float32)  # none of them in the memory
    labels = np.arange(30) % 10
    task = tf.data.Dataset.from_tensor_slices((images, labels)).batch(10)
    accuracy, graph = model.accuracy_and_test_graph(images, labels)
    assert graph.shape == (30, 20) and 0 <= accuracy <= 100
    model.kernel_log_scale.assign(np.log(1e-6))  # no edge reaches the memory: a constant prediction
    line = model.learning_warning(0, images, labels)
    assert line.startswith("warning: gcl: after task 1 it classifies 10% of that task's training images right "
                           "(chance: 10%): 100% of them have almost no edge to the memory (kernel width 1e-06")
    assert "try a larger method.kernel_start_edge" in line and "\n" not in line
    model.kernel_log_scale.assign(np.log(1e6))  # every edge near 1: the memory's average for all
    line = model.learning_warning(2, images, labels)
    assert "after task 3" in line and "weigh 100% of the memory alike" in line and "try a smaller" in line
    fixed, _ = _small_gcl(kernel_width=1e6)
    fixed.fit(stream.take(2), verbose=0)
    assert "try method.kernel_width: median" in fixed.learning_warning(0, images, labels)
    capsys.readouterr()
    model.on_task_end(0, None)  # no stream to read: nothing to say
    assert capsys.readouterr().err == ""
    model.on_task_end(1, task)
    assert capsys.readouterr().err.splitlines() == [model.learning_warning(1, images, labels)]
    model.on_task_end(2, task)  # once per model
    assert capsys.readouterr().err == ""


def test_middling_edges_that_weigh_the_memory_alike_are_named_though_their_samples_look_selective():
    """GCL on the baselines' ResNet-18 under today's protocol
    (docs/reproducing/todays_protocol_diagnosis.md; its first task
    alone, median width) ends with every expected edge between 0.17 and 1 (median 0.38) and stays
    at chance, silently: a sample at the
    test temperature draws about 40% of those edges on at random, and a row of random edges reads as
    singling out 40% of the memory. Whether a row weighs the memory alike is read on the expected
    graph (the Bernoulli means); whether it reaches nothing, on the sample."""
    from gcl_tf.methods.gcl.graph import median_kernel_width, neighbourhoods, squared_distances

    model, stream = _small_gcl()
    model.fit(stream.take(3), verbose=0)
    images = np.random.default_rng(1).random((30, 8, 8, 1), dtype=np.float32)
    labels = np.arange(30) % 10
    u_t, _ = model.embed(images, training=False)
    u_c, _ = model.embed(model.memory.images[:20], training=False)
    width = median_kernel_width(np.median(squared_distances(u_t, u_c).numpy()), 0.4)  # the median edge: 0.4
    model.kernel_log_scale.assign(np.log(width))
    accuracy, sampled, expected = model.accuracy_and_test_graphs(images, labels)
    assert accuracy < 10.0 + model.ABOVE_CHANCE
    np.testing.assert_allclose(np.median(expected), 0.4, atol=0.02)
    assert neighbourhoods(sampled)[1] < model.UNIFORM_SPREAD <= neighbourhoods(expected)[1]
    np.testing.assert_array_equal(model.accuracy_and_test_graph(images, labels)[1], sampled)
    line = model.learning_warning(0, images, labels)
    assert line is not None and f"weigh {100 * neighbourhoods(expected)[1]:.0f}% of the memory alike" in line


def test_the_warning_names_a_trunk_the_kernel_does_not_suit_and_not_a_sparse_graph_that_learns(capsys):
    """Split digits (docs/gcl/extensions.md): the authors' width with a user's small CNN weighs the memory
    alike and stops learning from its second task on: said once, after task 2. The MLP from a
    sparse start (kernel_start_edge 1e-5, as the searches of docs/tuning.md chose: all but a few
    edges below 0.01) learns every task (ACC about 49) and is not warned about."""
    capsys.readouterr()
    assert _split_digits_acc("mlp", 0, kernel_start_edge=1e-5, **PAPER_HEAD) > 40
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: gcl:")]
    assert _split_digits_acc("cnn", 0, kernel_width=None, **PAPER_HEAD) < 20
    lines = capsys.readouterr().err.splitlines()
    warned = [line for line in lines if line.startswith("warning: gcl:")]
    assert len(warned) == 1 and "after task 2" in warned[0] and "of the memory alike" in warned[0], lines


def _split_digits_acc(trunk, seed, **keys):
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


@pytest.mark.parametrize("trunk", ["mlp", "cnn"])
def test_the_defaults_learn_with_the_mlp_and_a_users_cnn(trunk):
    """With the constructor's defaults GCL learns on split digits with either trunk: their
    embeddings are ~5x apart in scale (median squared distance 2.2 vs 0.46 at initialisation), so
    no fixed width serves both; the width from the median does. Over seeds 0-4 (docs/gcl/extensions.md) it ends
    at 53 (MLP) and 58 (CNN), ER at 39 and 39; the authors' width stays at chance (10) with both."""
    acc = np.mean([_split_digits_acc(trunk, seed) for seed in (0, 1, 2)])
    assert acc >= 30, acc


@pytest.mark.parametrize("backbone", ["mlp", "convnet", "resnet18"])
def test_gcl_takes_any_trunk_from_a_config(backbone):
    """model.backbone builds GCL on that trunk (its features, whatever their width, feed the
    heads) and its steps learn through it: on two batches seen again and again the loss of the
    same batch falls and the trunk's weights move; the kernel's width is set from the
    embeddings' median distance at the first step with contexts."""
    from gcl_tf.backbones import feature_size

    config = config_lib.resolve({"seed": 0, "method": {"name": "gcl", "memory_size": 20},
                                 "model": {"backbone": backbone, "filters": 4, "hidden_size": 16},
                                 "train": {"optimizer": "adam", "learning_rate": 0.01}})
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    assert model.trunk.name == backbone
    assert model.edge_head.kernel.shape[0] == model.latent_head.kernel.shape[0] == feature_size(model.trunk, (8, 8, 1))
    before = [v.numpy().copy() for v in model.trunk.trainable_variables]
    data = list(batches(2, seed=7))
    losses = [float(model.train_step(data[i % 2])["loss"]) for i in range(12)]  # the first only fills the memory
    assert losses[0] == 0.0 and losses[11] < 0.85 * losses[1], losses  # batch 2, first seen and 6th time
    assert any(not np.array_equal(b, v.numpy()) for b, v in zip(before, model.trunk.trainable_variables))
    assert bool(model.kernel_width_set.numpy())


def test_the_task_end_check_and_evaluation_log_no_tensorflow_warning(monkeypatch):
    """GCL's task-end check runs eagerly: its test graph samples must not ask tf.map_fn for
    parallel iterations there ("Setting parallel_iterations > 1 has no effect when executing
    eagerly", once in every run); in a graph (evaluate) they still run 4 at a time."""
    import logging

    from tensorflow.python.platform import tf_logging

    from gcl_tf.methods.gcl.prediction import map_parallel_iterations

    monkeypatch.setattr(tf_logging, "_log_counter_per_token", {})  # TF logs it once per process
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    tf.get_logger().addHandler(handler)
    try:
        model, stream = _small_gcl()
        model.fit(stream, verbose=0)
        model.on_task_end(0, stream)
        model.evaluate(stream, verbose=0)
    finally:
        tf.get_logger().removeHandler(handler)
    assert [record.getMessage() for record in records] == []
    assert map_parallel_iterations() == 1 and tf.function(map_parallel_iterations)() == 4


# ----------------------------------------------------------------------------- own_latent
def test_own_latent_adds_the_images_own_term_to_every_graphs_logits(tmp_path):
    """own_latent: the head reads [ReLU(Z), ReLU(l)] of each image: with deterministic graphs the
    logits are penultimate(x) @ output_layer().kernel + bias, penultimate [N, 3H] (2H without it);
    the own head learns (its gradient is not zero) and a saved learner keeps it. With the own
    head's weights at 0 the predictions are the paper's head's."""
    import gcl_tf

    assert gcl.Config().own_latent is True  # our default since issue 33 (the paper's head: false)
    paper, stream = _small_gcl(stochastic_graphs=False, own_latent=False)
    assert paper.own_head is None
    model, _ = _small_gcl(stochastic_graphs=False, own_latent=True)
    model.fit(stream, verbose=0)
    x, y = next(iter(stream))
    features = model.penultimate(x).numpy()
    assert features.shape == (10, 3 * 16)
    layer = model.output_layer()
    logits = features @ layer.kernel.numpy() + layer.bias.numpy()
    log_probs = model.predict_log_probs(x, tf.ones([10], tf.bool)).numpy()
    np.testing.assert_allclose(log_probs, tf.nn.log_softmax(logits).numpy(), rtol=1e-4, atol=1e-4)
    with tf.GradientTape() as tape:
        out = model.training_forward(x, tf.cast(y, tf.int32))
    grad = tape.gradient(out.logs["loss"], model.own_head.kernel)
    assert grad is not None and float(tf.reduce_max(tf.abs(grad))) > 0
    path = str(tmp_path / "learner.keras")
    model.save(path)
    loaded = gcl_tf.load_model(path)
    assert loaded.own_latent and loaded.get_config()["own_latent"] is True
    np.testing.assert_allclose(loaded.predict_log_probs(x, tf.ones([10], tf.bool)).numpy(), log_probs, rtol=1e-5,
                               atol=1e-6)
    without = model.predict_log_probs(x, tf.ones([10], tf.bool)).numpy()
    model.own_head.kernel.assign(tf.zeros_like(model.own_head.kernel))
    paper_head = tf.nn.log_softmax(features[:, :32] @ model.output_head.kernel.numpy() + layer.bias.numpy())
    np.testing.assert_allclose(model.predict_log_probs(x, tf.ones([10], tf.bool)).numpy(), paper_head.numpy(),
                               rtol=1e-4, atol=1e-4)
    assert not np.allclose(without, paper_head.numpy(), atol=1e-3)  # the own term moved the predictions


def test_own_latent_adds_its_term_to_each_sampled_test_graph():
    """With sampled test graphs (the default): the prediction is the average over the samples of
    log_softmax(f3(ReLU(Z_s)) + W_own ReLU(l)); with W_own = 0 it is the paper's head's."""
    from gcl_tf.methods.gcl.graph import average_log_probs, relaxed_bernoulli

    model, stream = _small_gcl(own_latent=True, test_graph_samples=3)
    model.fit(stream, verbose=0)
    x = next(iter(stream))[0]
    mask = tf.ones([10], tf.bool)
    logits_e, values, noise, own = model.test_graphs(x, seed=(3, 4))
    assert noise.shape == (3, 10, 20) and own.shape == (10, 10)
    by_hand = average_log_probs(tf.stack([
        tf.nn.log_softmax(model.classify(relaxed_bernoulli(logits_e, model.test_temperature, eps), values) + own)
        for eps in noise]))
    got = model.log_probs_of_test_graphs(logits_e, values, noise, own, mask)
    np.testing.assert_allclose(got.numpy(), by_hand.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(model.predict_log_probs(x, mask, seed=(3, 4)).numpy(), got.numpy(), rtol=1e-5,
                               atol=1e-6)
    model.own_head.kernel.assign(tf.zeros_like(model.own_head.kernel))
    np.testing.assert_allclose(model.predict_log_probs(x, mask, seed=(3, 4)).numpy(),
                               model.log_probs_of_test_graphs(logits_e, values, noise, None, mask).numpy(),
                               rtol=1e-4, atol=1e-5)
    assert not np.allclose(got.numpy(), model.log_probs_of_test_graphs(logits_e, values, noise, None, mask).numpy(),
                           atol=1e-3)


# ----------------------------------------------------------------------------- test_prediction
def test_label_vote_logits_are_the_kernel_weighted_vote_of_the_memorys_labels():
    """softmax(label_vote_logits) = sum_j g_j [y_j = y] / sum_j g_j, by hand; a row with no edge
    votes uniformly; an empty slot (a zero label row) votes for nothing."""
    from gcl_tf.methods.gcl.graph import label_vote_logits

    graph = np.array([[0.9, 0.3, 0.6, 0.5], [0.0, 0.0, 0.0, 0.0]], np.float32)  # [N=2, M=4]
    labels = np.eye(3, dtype=np.float32)[[0, 2, 2, 1]]
    labels[3] = 0.0  # slot 3 is empty
    probs = tf.nn.softmax(label_vote_logits(tf.constant(graph), tf.constant(labels))).numpy()
    np.testing.assert_allclose(probs[0], [0.9 / 1.8, 0.0, 0.9 / 1.8], atol=1e-6)
    np.testing.assert_allclose(probs[1], [1 / 3] * 3, atol=1e-6)


def test_vote_predicts_from_the_expected_graph_and_the_memorys_labels_only():
    """test_prediction: vote: log p(y | x) is the log of the vote along sigmoid(E) from x to the
    filled memory (computed here in numpy from the model's embeddings), for every seed (nothing
    is sampled), masked classes excluded; training is the head's, to the bit."""
    from gcl_tf.methods.gcl.graph import edge_logits

    head, stream = _small_gcl()
    head.fit(stream, verbose=0)
    model, _ = _small_gcl(test_prediction="vote")
    model.fit(stream, verbose=0)
    for a, b in zip(head.trainable_weights, model.trainable_weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    x = next(iter(stream))[0]
    filled = model.memory.filled().numpy()
    assert filled.any()
    u_c, _ = model.embed(model._context_images(), training=False)
    u_t, _ = model.embed(x, training=False)
    graph = tf.sigmoid(edge_logits(u_t, u_c, model.kernel_log_scale)).numpy() * filled
    votes = graph @ np.eye(10)[model.memory.labels.numpy()]  # [N, K]
    mask = np.arange(10) < 6
    expected = votes[:, mask] / votes[:, mask].sum(-1, keepdims=True)
    got = np.exp(model.predict_log_probs(x, tf.constant(mask), seed=(1, 2)).numpy())
    np.testing.assert_allclose(got[:, mask], expected, rtol=1e-4, atol=1e-6)
    assert np.all(got[:, ~mask] < 1e-6)
    np.testing.assert_allclose(model.predict_log_probs(x, tf.constant(mask), seed=(5, 6)).numpy()[:, mask],
                               np.log(expected), rtol=1e-4, atol=1e-5)
    assert not np.allclose(np.exp(head.predict_log_probs(x, tf.constant(mask), seed=(1, 2)).numpy())[:, mask],
                           expected, atol=1e-2)  # the paper's head predicts otherwise


def test_the_vote_alone_draws_no_test_graph_noise():
    """The vote samples no graph: with it as the only prediction neither the memory estimate nor
    the model holds the [S, N, M] test noise; with the head beside it (or as the prediction) both do."""
    import gcl_tf
    from gcl_tf.config import load_config
    from gcl_tf.methods.gcl.model import GCL

    from conftest import REPO

    def noise_buffers(*sets):
        config = load_config(os.path.join(REPO, "configs", "split_cifar10_ocl.yaml"), ["method.name=gcl", *sets])
        return [name for name, _ in GCL.memory_buffers(config) if "noise" in name]

    assert noise_buffers() == ["the test graphs' noise [30, 500, 500]"]
    assert noise_buffers("method.test_prediction=vote") == []
    assert noise_buffers("method.test_prediction=vote", "method.also_test_predictions=[head]") == noise_buffers()
    assert noise_buffers("method.also_test_predictions=[vote]") == noise_buffers()

    def model(**keys):
        return gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), memory_size=20, hidden_size=16, eval_batch_size=50,
                          **keys)

    assert model(test_prediction="vote")._test_noise is None
    assert model(test_prediction="vote", also_test_predictions=["head"])._test_noise is not None


@pytest.mark.slow
def test_also_test_predictions_evaluates_the_vote_in_the_same_run_as_a_run_of_its_own(tmp_path):
    """also_test_predictions: [vote] gives, beside the head's matrix, the accuracy matrix a run
    with test_prediction: vote gives (training does not depend on it)."""
    from gcl_tf import train

    from helpers import digits_config

    def config(**method):
        return digits_config({"name": "gcl", "memory_size": 50, **method},
                             benchmark={"num_tasks": 2, "samples_per_task": 100})

    both = train.run(config(also_test_predictions=["vote"]), str(tmp_path / "both"), verbose=0)
    alone = train.run(config(test_prediction="vote"), str(tmp_path / "alone"), verbose=0)
    vote = both["evaluations"]["vote"]
    assert vote["settings"] == {"test_prediction": "vote"}
    assert vote["accuracy_matrix"] == alone["accuracy_matrix"] and vote["acc"] == alone["acc"]
    assert both["accuracy_matrix"] != vote["accuracy_matrix"]


# ----------------------------------------------------------------------------- target_loss
def test_target_loss_present_leaves_the_classes_absent_from_the_batch_alone():
    """target_loss: present (ER-ACE's asymmetric cross-entropy for the incoming batch): the
    targets' cross-entropy is over the classes in the batch only. With the context and graph
    terms off, the loss's gradient on the output biases of the classes absent from the batch is
    zero (with ``all``, the paper, it pushes them down), the loss is below ``all``'s on the same
    state, and a batch holding every class gives both the same loss."""
    import gcl_tf

    assert gcl.Config().target_loss == "present" == gcl_tf.GCL(num_classes=3, input_shape=(4,)).target_loss
    from gcl_tf.errors import ConfigError

    with pytest.raises(ConfigError, match="GCL.target_loss: 'some' is not allowed; allowed: all, present"):
        gcl_tf.GCL(num_classes=3, input_shape=(4,), target_loss="some")
    model, stream = _small_gcl(stochastic_graphs=False, context_lambda=0.0, graph_lambda=0.0, own_latent=True,
                               target_loss="present")
    model.fit(stream, verbose=0)
    x = next(iter(stream))[0]

    def loss_and_bias_gradient(target_loss, labels):
        model.target_loss = target_loss
        with tf.GradientTape() as tape:
            out = model.training_forward(x, tf.constant(labels, tf.int32))
        return float(out.logs["loss"]), tape.gradient(out.logs["loss"], model.output_head.bias).numpy()

    labels = [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]  # classes 3-9 absent
    present_loss, present_grad = loss_and_bias_gradient("present", labels)
    all_loss, all_grad = loss_and_bias_gradient("all", labels)
    assert np.all(present_grad[3:] == 0) and np.all(np.abs(present_grad[:3]) > 0)
    assert np.all(all_grad[3:] > 0)  # the paper's loss lowers the absent classes' logits
    assert 0 < present_loss < all_loss
    every_class = list(range(10))
    assert loss_and_bias_gradient("present", every_class)[0] == pytest.approx(
        loss_and_bias_gradient("all", every_class)[0], rel=1e-6)


def test_a_config_or_learner_saved_before_the_defaults_changed_reads_back_as_it_ran(tmp_path):
    """own_latent and target_loss became true / present in issue 33: a config.yaml or learner saved
    before lacks them and ran with the paper's false / all, which is how it reads back (resume,
    the suite's finished-run check, export, keras load); a user's config without them gets today's
    defaults, and a config saved since holds them both."""
    import yaml

    import gcl_tf
    from gcl_tf import config as config_lib

    assert gcl.Config.former_defaults == {"own_latent": False, "target_loss": "all"}
    user = config_lib.resolve({"method": {"name": "gcl"}})
    assert user.method.own_latent is True and user.method.target_loss == "present"
    saved = user.to_dict()
    assert saved["method"]["own_latent"] is True and saved["method"]["target_loss"] == "present"
    before = user.to_dict()
    del before["method"]["own_latent"], before["method"]["target_loss"]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(before))
    for read in (config_lib.load_saved_config(str(path)).to_dict(), config_lib.saved_as_today(before)):
        assert read["method"]["own_latent"] is False and read["method"]["target_loss"] == "all"
    assert config_lib.saved_as_today(saved) == saved  # saved since: as saved
    # As --config: a file in a run's or search's folder reads as it ran, a user's own file with today's defaults.
    assert config_lib.load_config(str(path)).method.own_latent is True
    for beside in ("model.json", "best.json"):
        (tmp_path / beside).write_text("{}")
        read = config_lib.load_config(str(path)).method
        assert read.own_latent is False and read.target_loss == "all"
        (tmp_path / beside).unlink()
    er = config_lib.resolve({"method": {"name": "er"}}).to_dict()
    assert config_lib.with_former_defaults(er) == er  # another method's keys are left alone

    model, _ = _small_gcl()
    assert model.own_head is not None and model.target_loss == "present"
    learner = model.get_config()
    restored = gcl_tf.GCL.from_config(learner)
    assert restored.own_head is not None and restored.target_loss == "present"
    del learner["own_latent"], learner["target_loss"]
    old = gcl_tf.GCL.from_config(learner)
    assert old.own_head is None and old.target_loss == "all"
