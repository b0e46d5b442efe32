"""GCL's training step and predictions: the first batches, Adam's first update, gradients, one trace,
seeds, state in variables, fixed shapes, XLA, the large-memory options and the evaluation caches."""
import dataclasses
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf
from gcl_harness import PAPER_HEAD, batches, make_config, make_model

from gcl_tf import methods, salts
from gcl_tf.memory import step_seed
from gcl_tf.methods.base import cross_entropy
from gcl_tf.methods.gcl import graph as gcl_graph


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
    expected = gcl_graph.edge_logits(u, u, model.kernel_log_scale).numpy()
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
    normalized = gcl_graph.normalize_rows(tf.constant(graph), mask)
    expected = tf.reshape(tf.matmul(normalized, paper_values), [-1, 2 * H]).numpy()
    got = model.aggregate(tf.constant(graph), values).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert np.all(got[3] == 0)
    # a sparse graph (tiny edges, one strong one) normalises without cancellation
    graph = np.full((4, M), 1e-9, np.float32)
    graph[np.arange(4), np.arange(4)] = 1.0
    mask = np.broadcast_to(valid, graph.shape)
    expected = tf.matmul(gcl_graph.normalize_rows(tf.constant(graph), mask), paper_values).numpy()
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
        return gcl_graph.logit_of_exp(v)

    theoretical, numerical = tf.test.compute_gradient(f, [x])
    np.testing.assert_allclose(theoretical[0], numerical[0], rtol=1e-4, atol=1e-6)
    near = tf.constant([-1e-4, -0.01], tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(near)
        y = gcl_graph.logit_of_exp(near)
    np.testing.assert_allclose(tape.gradient(y, near).numpy(), 1.0 / (1.0 - np.exp([-1e-4, -0.01])), rtol=1e-9)
    with tf.GradientTape() as tape:
        clipped = tf.constant([0.0, 1e-9, 0.5], tf.float64)
        tape.watch(clipped)
        y = gcl_graph.logit_of_exp(clipped)
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
        e = gcl_graph.edge_logits(u, u[:C], model.kernel_log_scale)  # [C + T, C]
        g = tf.sigmoid(e) * (1.0 - tf.eye(C + 10, C))
        g = g / tf.reduce_sum(g, axis=1, keepdims=True)
        values = tf.concat([latents[:C], model.label_encoder(tf.one_hot(context_y, 10))], axis=1)
        logits = model.output_head(tf.nn.relu(g @ values))
        ce_c = cross_entropy(context_y, logits[:C])
        ce_t = cross_entropy(y, logits[C:])
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
        model.settings = dataclasses.replace(model.settings, fuse_regularizer=fused)
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
    expected = gcl_graph.edge_logits(tf.constant(s), tf.constant(s), model.kernel_log_scale).numpy()
    np.testing.assert_allclose(stored, expected, rtol=1e-5)
    assert float(gcl_graph.graph_regularizer(tf.constant(expected), tf.constant(stored), tf.ones([4], tf.bool))) == \
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
        seed = step_seed(model.seed, model.step_counter, salts.TEST_GRAPH).numpy()
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
    logits_e = gcl_graph.edge_logits(u_t, u_c, model.kernel_log_scale)
    noise = gcl_graph.logistic_noise(tf.concat([[4], tf.shape(logits_e)], 0), seed)
    temperature = model.settings.test_temperature
    probs = [tf.nn.softmax(model.classify(gcl_graph.relaxed_bernoulli(logits_e, temperature, noise[s]), values)).numpy()
             for s in range(4)]
    np.testing.assert_allclose(got, np.mean(probs, axis=0), rtol=1e-4, atol=1e-6)
    assert not np.allclose(probs[0], probs[1], atol=1e-3)  # the samples differ



def test_a_second_target_view_is_trained_on_and_the_memory_keeps_the_first():
    """``target_views: 2``: a second augmentation of the incoming batch goes through the trunk beside
    the first, each view a target with the image's label; the memory's edges are the first view's.
    With a per-image trunk (no BatchNorm) and expected graphs the one-view model's step is the first
    half of the two-view one: the same edges and context loss, a target loss that also holds the
    second view's (the mean of both), and one trace of the compiled step."""
    import keras

    import gcl_tf
    from gcl_tf.errors import ConfigError

    def model(views):
        keras.utils.set_random_seed(0)
        m = gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), memory_size=20, hidden_size=16, augment="crop_flip",
                       stochastic_graphs=False, target_views=views)
        m.compile(optimizer=keras.optimizers.Adam(1e-3))
        return m

    one, two = model(1), model(2)
    (x0, y0), (x1, y1), (x2, y2) = batches(3, seed=4)
    for m in (one, two):
        m.train_step((x0, y0))  # fills the memory
    a, b = one.training_forward(x1, y1), two.training_forward(x1, y1)
    for name, got, want in zip(b.edges._fields, b.edges, a.edges):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)
    assert b.edges.embeddings.shape[0] == 20 + 10  # the memory's 20 context slots, then the batch once
    np.testing.assert_allclose(float(b.logs["context_loss"]), float(a.logs["context_loss"]), rtol=1e-5)
    second = 2.0 * float(b.logs["target_loss"]) - float(a.logs["target_loss"])  # the second view's mean CE
    assert abs(second - float(a.logs["target_loss"])) > 1e-3 and second > 0.0  # another draw, trained on
    traces = []
    original = two.learn
    two.learn = lambda x, y: traces.append(1) or original(x, y)
    two.fit(tf.data.Dataset.from_tensor_slices((tf.concat([x1, x2], 0), tf.concat([y1, y2], 0))).batch(10),
            epochs=2, verbose=0, shuffle=False)
    assert len(traces) == 1 and int(two.memory.num_filled.numpy()) == 20
    from gcl_tf.config import load_config
    from gcl_tf.methods.gcl.model import GCL

    from conftest import REPO

    today = os.path.join(REPO, "configs", "split_cifar10_ocl.yaml")
    step = [[name for name, _ in GCL.memory_buffers(load_config(today, ["method.name=gcl", *sets]))
             if "training step" in name][0] for sets in ([], ["method.target_views=2"])]
    assert step == ["a training step's graphs (3 x [138, 128])", "a training step's graphs (3 x [148, 128])"]
    with pytest.raises(ConfigError, match=r"target_views: 2 draws each view from the in-step augmentation, and "
                                          r"benchmark.augment is 'none'; allowed: .*target_views: 1, or"):
        gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), memory_size=20, target_views=2)


def test_replicas_take_their_views_noise_rows_as_a_single_device_lays_them_out():
    """The rows of the global training noise each replica takes: contexts, then per view its own
    targets, in the single-device layout (contexts, view 1 of the global batch, view 2)."""
    rows = [gcl_graph.replica_noise_rows(3, 2, 2, 2, r).numpy().tolist() for r in (0, 1)]
    assert rows == [[0, 1, 2, 3, 4, 7, 8], [0, 1, 2, 5, 6, 9, 10]]
    one_view = gcl_graph.replica_noise_rows(3, 4, 1, 2, 1).numpy().tolist()
    assert one_view == [0, 1, 2] + [3 + 4 + t for t in range(4)]  # one view: k + r T + range(T)


def test_vote_cross_entropy_is_the_memorys_vote_for_each_rows_label():
    """By hand: the expected graph k (self-edges of the context rows out, invalid contexts voting
    for nothing), the vote p(y) = (sum_j k_j [y_j = y] + eps) / (sum_j k_j + K eps), -log p(label)."""
    rng = np.random.default_rng(3)
    k, rows_n, K = 4, 7, 3
    log_k = np.log(rng.uniform(0.05, 0.9, (rows_n, k))).astype(np.float32)
    one_hot = np.eye(K, dtype=np.float32)[[0, 1, 1, 2]]
    one_hot[3] = 0.0  # an invalid context
    labels = np.array([0, 1, 1, 2, 2, 0, 1])
    logits_e = gcl_graph.logit_of_exp(tf.constant(log_k))  # E, as the step computes it
    got = gcl_graph.vote_cross_entropy(logits_e, tf.constant(one_hot), tf.constant(labels)).numpy()
    graph = np.exp(log_k)
    graph[np.arange(k), np.arange(k)] = 0.0
    votes = graph @ one_hot + gcl_graph.ROW_EPS
    want = -np.log(votes[np.arange(rows_n), labels] / votes.sum(1))
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_vote_lambda_adds_the_votes_loss_over_targets_and_valid_contexts():
    """``vote_lambda``: the step's loss is the paper's plus vote_lambda times the vote's mean
    cross-entropy over the targets plus its mean over the valid contexts, from the step's edge
    embeddings (numpy); 0 (the default) adds nothing and logs no vote loss."""
    import keras

    import gcl_tf

    keras.utils.set_random_seed(0)
    m = gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), memory_size=20, hidden_size=16, vote_lambda=2.0)
    m.compile(optimizer=keras.optimizers.Adam(1e-3))
    (x0, y0), (x1, y1) = batches(2, seed=5)
    m.train_step((x0, y0))  # fills 10 of the 20 slots: the other 10 contexts are invalid
    slots, valid = m.select_contexts()
    with_vote = m.training_forward(x1, y1, slots, valid)
    with m.evaluation_variant({"vote_lambda": 0.0}):
        without = m.training_forward(x1, y1, slots, valid)
    assert "vote_loss" not in without.logs
    u, _ = m.embed_step(m.context_images(slots, valid, fallback=x1), x1)
    u, k = u.numpy().astype(np.float64), slots.shape[0]
    d2 = ((u[:, None, :] - u[None, :k, :]) ** 2).sum(-1)
    graph = np.exp(-0.5 * d2 / np.exp(float(m.kernel_log_scale.numpy())))  # [k + T, k]
    graph[np.arange(k), np.arange(k)] = 0.0
    ok = valid.numpy()
    labels = np.concatenate([m.memory.labels.numpy()[slots.numpy()], y1.numpy()])
    votes = graph @ (np.eye(10)[labels[:k]] * ok[:, None]) + gcl_graph.ROW_EPS
    ce = -np.log(votes[np.arange(len(labels)), labels] / votes.sum(1))
    want = ce[k:].mean() + ce[:k][ok].mean()
    assert 0 < ok.sum() < k
    np.testing.assert_allclose(float(with_vote.logs["vote_loss"]), want, rtol=1e-4)
    np.testing.assert_allclose(float(with_vote.logs["loss"]), float(without.logs["loss"]) + 2.0 * want, rtol=1e-4)
    with m.evaluation_variant({"vote_targets": "present"}):  # the incoming images' vote among their batch's classes
        present_only = m.training_forward(x1, y1, slots, valid)
    own = np.isin(np.arange(10), y1.numpy())
    among = votes[k:] * own
    ce_present = -np.log(among[np.arange(len(labels) - k), labels[k:]] / among.sum(1))
    assert not np.allclose(ce_present.mean(), ce[k:].mean(), rtol=1e-3)
    np.testing.assert_allclose(float(present_only.logs["vote_loss"]), ce_present.mean() + ce[:k][ok].mean(), rtol=1e-4)
