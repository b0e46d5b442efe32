"""GCL's graph regulariser held to the weights' moving average (method.graph_target: average): the
edges it holds are those the averaged trunk, edge head and kernel width give the step's own images,
computed inside the step without touching the learner's weights or BatchNorm statistics; it needs
the average, and says so in one line."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from gcl_harness import make_config

from gcl_tf.errors import ConfigError


def teacher_gcl(momentum=0.5, samples=60, **keys):
    """A small GCL on a trunk with BatchNorm, whose optimizer keeps the weights' average, after a
    few steps (so that the averages and the weights differ)."""
    import keras

    import gcl_tf

    keras.utils.set_random_seed(0)
    trunk = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
                              keras.layers.ReLU(), keras.layers.Flatten()])
    model = gcl_tf.GCL(backbone=trunk, num_classes=10, memory_size=20, hidden_size=16, edge_memory="embeddings",
                       context_batch=10, **keys)
    model.compile(optimizer=keras.optimizers.Adam(1e-2, use_ema=True, ema_momentum=momentum))
    rng = np.random.default_rng(0)
    x, y = rng.random((samples, 8, 8, 1), dtype=np.float32), np.arange(samples) % 10
    history = model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(10), verbose=0)
    return model, history


def values(variables):
    return [np.array(v.numpy()) for v in variables]


def test_the_held_edges_are_the_averaged_models_on_the_same_images():
    from gcl_tf.methods.gcl.graph import edge_logits
    from gcl_tf.optimizers import averages_in_place

    model, _ = teacher_gcl(graph_target="average")
    images = tf.constant(np.random.default_rng(1).random((14, 8, 8, 1), dtype=np.float32))
    weights, statistics = values(model.trainable_variables), values(model.non_trainable_variables)
    got = model.average_edge_logits(images, 10).numpy()
    for after, before in zip(values(model.trainable_variables) + values(model.non_trainable_variables),
                             weights + statistics):
        np.testing.assert_array_equal(after, before)  # nothing assigned: weights, BatchNorm's statistics
    assert got.shape == (10, 10)
    with averages_in_place(model.optimizer):  # the same model with the averages in its weights, by hand
        u = model.edge_embeddings(model.trunk(images, training=True))[:10]  # BatchNorm over all 14
        want = edge_logits(u, u, model.kernel_log_scale).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    u = model.edge_embeddings(model.trunk(images, training=True))[:10]
    learned = edge_logits(u, u, model.kernel_log_scale).numpy()
    assert np.abs(learned - want).max() > 1e-2  # the learner's own edges are another target


def test_a_gcl_held_to_the_average_learns_and_holds_its_contexts():
    model, history = teacher_gcl(graph_target="average", regularize_below=None)  # the paper's hold: from the start
    graph_loss, held = history.history["graph_loss"][-1], history.history["regularized_fraction"][-1]
    assert np.isfinite(history.history["loss"][-1]) and np.isfinite(graph_loss)
    assert held > 0 and graph_loss > 0  # contexts were held, to edges the learner's differ from
    _, stored = teacher_gcl(graph_target="stored", regularize_below=None)
    assert stored.history["graph_loss"][-1] != pytest.approx(graph_loss)


def test_the_average_is_required_in_one_line():
    import keras

    import gcl_tf

    with pytest.raises(ConfigError) as info:
        make_config(graph_target="average")
    assert str(info.value) == ("method.graph_target: average needs the weights' moving average; allowed: "
                               "train.ema_momentum set (e.g. 0.99), or method.graph_target: stored")
    model = gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), memory_size=20, hidden_size=16, graph_target="average")
    model.compile(optimizer=keras.optimizers.Adam(1e-3))  # no use_ema: the Python API finds it at the first step
    x, y = np.random.default_rng(0).random((20, 8, 8, 1), dtype=np.float32), np.arange(20) % 10
    with pytest.raises(ConfigError, match="method.graph_target: average needs the weights' moving average"):
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(10), verbose=0)


def test_the_average_starts_from_the_width_the_median_sets():
    """kernel_width: median sets the kernel's width at the first step with contexts, outside the
    optimizer: the average takes it too (else it would hold the width it replaced for hundreds of
    steps, and the held edges with it)."""
    model, _ = teacher_gcl(momentum=0.999, graph_target="average", kernel_width="median", kernel_start_edge=0.001)
    from gcl_tf.optimizers import average_of

    assert bool(model.kernel_width_set.numpy())
    average = float(average_of(model.optimizer, model.kernel_log_scale).numpy())
    assert average == pytest.approx(float(model.kernel_log_scale.numpy()), abs=0.1)  # a few steps of learning apart
    assert abs(average - np.log(np.sqrt(16))) > 0.5  # not the initial width sqrt(H) it replaced


# ------------------------------------------------------------------- rule 19: the average's predictions distilled
def test_the_distillation_loss_is_t_squared_kl_from_the_teacher():
    from gcl_tf.optimizers import distillation_loss

    rng = np.random.default_rng(0)
    t, s = rng.normal(size=(5, 4)).astype(np.float32) * 3, rng.normal(size=(5, 4)).astype(np.float32) * 3

    def softmax(z):
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    p, q = softmax(t / 4.0), softmax(s / 4.0)
    kl = (p * (np.log(p) - np.log(q))).sum(axis=1)
    np.testing.assert_allclose(distillation_loss(t, s, 4.0).numpy(), 16.0 * kl.mean(), rtol=1e-5)
    weights = np.array([1, 0, 1, 0, 1], np.float32)  # rows that do not count
    np.testing.assert_allclose(distillation_loss(t, s, 4.0, weights).numpy(), 16.0 * kl[[0, 2, 4]].mean(), rtol=1e-5)
    assert distillation_loss(t, t, 2.0).numpy() == pytest.approx(0.0, abs=1e-6)
    teacher, student = tf.Variable(t), tf.Variable(s)
    with tf.GradientTape() as tape:
        loss = distillation_loss(teacher, student, 4.0)
    to_teacher, to_student = tape.gradient(loss, [teacher, student])
    assert to_teacher is None and np.abs(to_student.numpy()).max() > 1e-3  # only the student learns


def test_the_teacher_predicts_as_the_averaged_model_along_its_expected_graph():
    from gcl_tf.methods.gcl.graph import expected_graph
    from gcl_tf.optimizers import averages_in_place

    model, _ = teacher_gcl(graph_target="average", distill_lambda=1.0)
    rng = np.random.default_rng(1)
    contexts, targets = (tf.constant(rng.random((n, 8, 8, 1), dtype=np.float32)) for n in (10, 4))
    labels, valid = tf.constant(np.arange(10) % 10), tf.constant([True] * 8 + [False] * 2)
    weights, statistics = values(model.trainable_variables), values(model.non_trainable_variables)
    got = model.teacher(contexts, targets, labels, valid)
    for after, before in zip(values(model.trainable_variables) + values(model.non_trainable_variables),
                             weights + statistics):
        np.testing.assert_array_equal(after, before)  # nothing assigned
    assert got.logits.shape == (14, 10) and got.context_edges.shape == (10, 10)

    def by_hand():
        u, latents = model.embed_step(contexts, targets)  # BatchNorm over all 14, as the step's pass
        logits_e, graph = expected_graph(model.log_kernel(u, 10)[2])
        return logits_e[:10].numpy(), tf.concat(model.graph_logits(graph, latents, labels, valid, 10), 0).numpy()

    with averages_in_place(model.optimizer):
        edges, logits = by_hand()
    np.testing.assert_allclose(got.logits.numpy(), logits, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got.context_edges.numpy(), edges, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got.context_edges.numpy(), model.average_edge_logits(tf.concat([contexts, targets], 0),
                                                                                    10).numpy(), rtol=1e-3, atol=1e-3)
    assert np.abs(by_hand()[1] - logits).max() > 1e-2  # the learner's own predictions differ


def test_distilling_the_average_pulls_the_learner_to_it():
    """The same stream with and without the distillation: the loss is logged, and the learner's
    predictions of the memory end nearer the average's with it than without."""
    from gcl_tf.optimizers import distillation_loss

    def gap(model):
        slots, valid = model.select_contexts()
        contexts = model.context_images(slots, valid)
        labels = tf.gather(model.memory.labels, slots)
        teacher = model.teacher(contexts, contexts[:4], labels, valid).logits
        from gcl_tf.methods.gcl.graph import expected_graph
        u, latents = model.embed_step(contexts, contexts[:4])
        student = tf.concat(model.graph_logits(expected_graph(model.log_kernel(u, 10)[2])[1], latents, labels,
                                               valid, 10), 0)
        return float(distillation_loss(teacher, student, 4.0).numpy())

    kept, history = teacher_gcl(momentum=0.9, samples=200, distill_lambda=20.0)
    assert "distill_loss" in history.history and 0 < history.history["distill_loss"][-1] < 1e3
    free, plain = teacher_gcl(momentum=0.9, samples=200, distill_lambda=1e-9)  # the same passes, weighing nothing
    assert plain.history["loss"][-1] != pytest.approx(history.history["loss"][-1])
    assert gap(kept) < 0.2 * gap(free)  # measured: 0.0014 against 0.052


def test_distillation_needs_the_average_in_one_line():
    import keras

    import gcl_tf

    with pytest.raises(ConfigError) as info:
        make_config(distill_lambda=5.5)
    assert str(info.value) == ("method.distill_lambda: 5.5 needs the weights' moving average; allowed: "
                               "train.ema_momentum set (e.g. 0.99), or method.distill_lambda: 0")
    model = gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), memory_size=20, hidden_size=16, distill_lambda=5.5)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    x, y = np.random.default_rng(0).random((20, 8, 8, 1), dtype=np.float32), np.arange(20) % 10
    with pytest.raises(ConfigError, match=r"^method.distill_lambda: 5.5 needs the weights' moving average; allowed: an "
                                          r"optimizer with use_ema=True \(train.ema_momentum\), or distill_lambda: 0$"):
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(10), verbose=0)


def test_distill_targets_false_distills_the_contexts_alone():
    """Rule 20: the targets' logits get no gradient from the distillation, the valid contexts' do."""
    import gcl_tf

    rng = np.random.default_rng(2)
    teacher, contexts, targets = (tf.constant(rng.normal(size=(n, 10)).astype(np.float32)) for n in (14, 10, 4))
    valid = tf.constant([True] * 8 + [False] * 2)
    for distill_targets in (True, False):
        model = gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), memory_size=20, hidden_size=16,
                           distill_lambda=1.0, distill_targets=distill_targets)
        with tf.GradientTape() as tape:
            tape.watch([contexts, targets])
            loss = model.distill_loss(teacher, contexts, targets, valid)
        to_contexts, to_targets = tape.gradient(loss, [contexts, targets])
        assert np.abs(to_contexts.numpy()[:8]).min() > 0 and np.abs(to_contexts.numpy()[8:]).max() == 0
        assert (to_targets is not None and np.abs(to_targets.numpy()).min() > 0) == distill_targets


def test_distill_part_chooses_what_is_distilled_and_what_learns_from_it():
    """head: the step's logits (graph term + own term) to the teacher's, both terms learn; own_gradient (rule 25):
    the same loss, the graph's term a constant; own (rule 26): the own term alone to the teacher's."""
    import gcl_tf
    from gcl_tf.optimizers import distillation_loss

    rng = np.random.default_rng(3)
    teacher, graph, own = (tf.constant(rng.normal(size=(14, 10)).astype(np.float32)) for _ in range(3))
    valid = tf.constant([True] * 8 + [False] * 2)
    losses = {}
    for part in ("head", "own_gradient", "own"):
        model = gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), memory_size=20, hidden_size=16, distill_lambda=1.0,
                           distill_part=part)
        with tf.GradientTape() as tape:
            tape.watch([graph, own])
            out = graph + own
            losses[part] = model.distill_loss(teacher, out[:10], out[10:], valid, own)
        to_graph, to_own = tape.gradient(losses[part], [graph, own])
        assert np.abs(to_own.numpy()[8:10]).max() == 0 and np.abs(to_own.numpy()[:8]).min() > 0
        assert (to_graph is None or np.abs(to_graph.numpy()).max() == 0) == (part != "head")
    np.testing.assert_allclose(losses["head"].numpy(), losses["own_gradient"].numpy(), rtol=1e-6)
    alone = distillation_loss(teacher[:10], own[:10], 4.0, valid) + distillation_loss(teacher[10:], own[10:], 4.0)
    np.testing.assert_allclose(losses["own"].numpy(), alone.numpy(), rtol=1e-6)
    assert abs(losses["own"].numpy() - losses["head"].numpy()) > 1e-2


def test_the_own_teacher_is_the_averaged_own_term():
    """distill_part: own: the teacher's logits are the averaged model's own head on its own latents."""
    from gcl_tf.optimizers import averages_in_place

    model, _ = teacher_gcl(distill_lambda=1.0, distill_part="own")
    rng = np.random.default_rng(1)
    contexts, targets = (tf.constant(rng.random((n, 8, 8, 1), dtype=np.float32)) for n in (10, 4))
    labels, valid = tf.constant(np.arange(10) % 10), tf.constant([True] * 8 + [False] * 2)
    got = model.teacher(contexts, targets, labels, valid).logits.numpy()
    with averages_in_place(model.optimizer):
        want = model.own_logits(model.embed_step(contexts, targets)[1]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert np.abs(model.own_logits(model.embed_step(contexts, targets)[1]).numpy() - want).max() > 1e-2


def test_the_step_distills_through_the_own_head_alone_when_asked():
    """With ``distill_part`` own_gradient or own the graph's head (output_head) gets no gradient from the step's
    distillation; the own head does, and with the default (head) both do."""
    x, y = tf.constant(np.random.default_rng(4).random((10, 8, 8, 1), dtype=np.float32)), tf.range(10) % 10
    for part in ("head", "own_gradient", "own"):
        model, _ = teacher_gcl(distill_lambda=1.0, distill_part=part)
        with tf.GradientTape() as tape:
            distilled = model.training_forward(x, y).logs["distill_loss"]
        to_graph, to_own = tape.gradient(distilled, [model.output_head.kernel, model.own_head.kernel])
        assert np.abs(to_own.numpy()).max() > 0
        assert (to_graph is not None and np.abs(to_graph.numpy()).max() > 0) == (part == "head")


@pytest.mark.parametrize("part", ["own_gradient", "own"])
def test_distilling_the_own_term_needs_it_in_one_line(part):
    with pytest.raises(ConfigError, match=rf"^method.distill_part: {part} needs method.own_latent: true \(the "
                                          r"head's own term, which the distillation then trains alone\); allowed: "
                                          r"distill_part: head$"):
        make_config(own_latent=False, distill_part=part)
