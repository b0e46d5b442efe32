"""iCaRL: herding, nearest-mean-of-exemplars, the targets of the loss, exemplar bookkeeping, runs."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from gcl_tf import methods
from gcl_tf.errors import ConfigError
from gcl_tf.methods import icarl
from gcl_tf.train import run

import helpers  # noqa: E402

SPLIT = {"name": "split", "dataset": "digits", "source": "digits", "num_tasks": 5, "classes_per_task": 2,
         "samples_per_task": None}


def digits_config(method, **benchmark):
    return helpers.digits_config({"name": "icarl", **method}, benchmark={**SPLIT, **benchmark})


def herding_reference(features, m):
    """iCaRL Algorithm 4 written directly in numpy."""
    mu = features.mean(axis=0)
    chosen, total = [], np.zeros(features.shape[1])
    for k in range(1, min(m, len(features)) + 1):
        costs = [np.inf if i in chosen else np.linalg.norm(mu - (total + f) / k) for i, f in enumerate(features)]
        best = int(np.argmin(costs))
        chosen.append(best)
        total += features[best]
    return chosen


def normalized(rng, n, d):
    f = rng.normal(size=(n, d)).astype(np.float32)
    return f / np.linalg.norm(f, axis=1, keepdims=True)


def test_herding_first_picks_the_sample_closest_to_the_mean():
    rng = np.random.default_rng(0)
    features = normalized(rng, 40, 6)
    order = icarl.herding(features, 10).numpy()
    mean = features.mean(axis=0)
    assert order[0] == np.argmin(np.linalg.norm(features - mean, axis=1))
    assert order.tolist() == herding_reference(features, 10)
    assert len(set(order.tolist())) == 10


def test_herding_mean_of_chosen_approaches_the_class_mean_and_is_capped():
    rng = np.random.default_rng(1)
    features = normalized(rng, 30, 5)
    order = icarl.herding(features, 100).numpy()
    assert sorted(order.tolist()) == list(range(30))  # m > n: every sample once
    mean = features.mean(axis=0)
    errors = [np.linalg.norm(features[order[:k]].mean(axis=0) - mean) for k in (1, 5, 15, 30)]
    assert errors[-1] < 1e-6 and errors[2] < errors[0]


def test_nearest_mean_labels_class_prototypes():
    rng = np.random.default_rng(2)
    means = normalized(rng, 4, 8)
    scores = icarl.nearest_mean_scores(tf.constant(means * 3.0), tf.constant(means), tf.ones([4], tf.bool)).numpy()
    assert scores.argmax(axis=1).tolist() == [0, 1, 2, 3]  # features are normalised first
    noisy = means + 0.05 * rng.normal(size=means.shape).astype(np.float32)
    scores = icarl.nearest_mean_scores(tf.constant(noisy), tf.constant(means), tf.ones([4], tf.bool)).numpy()
    assert scores.argmax(axis=1).tolist() == [0, 1, 2, 3]
    x = 5.0 * means[:2] + rng.normal(size=(2, 8)).astype(np.float32)
    scores = icarl.nearest_mean_scores(tf.constant(x), tf.constant(means), tf.ones([4], tf.bool)).numpy()
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(scores, -((unit[:, None, :] - means[None]) ** 2).sum(-1), rtol=1e-5, atol=1e-6)
    allowed = tf.constant([False, True, True, True])
    scores = icarl.nearest_mean_scores(tf.constant(means[:1]), tf.constant(means), allowed).numpy()
    assert scores.argmax() != 0


def test_targets_one_hot_on_new_classes_and_distillation_on_old():
    labels = tf.constant([2, 0])
    old_logits = tf.constant([[1.0, -1.0, 5.0, 0.0], [0.5, 2.0, -3.0, 1.0]])
    current = tf.constant([False, False, True, True])
    old = tf.constant([True, True, False, False])
    targets = icarl.icarl_targets(labels, old_logits, current, old, 4).numpy()
    sig = 1 / (1 + np.exp(-old_logits.numpy()))
    np.testing.assert_allclose(targets[:, :2], sig[:, :2], rtol=1e-6)
    np.testing.assert_array_equal(targets[:, 2:], [[1.0, 0.0], [0.0, 0.0]])


def task_dataset(rng, classes, per_class):
    y = np.repeat(classes, per_class).astype(np.int32)
    x = rng.uniform(size=(len(y), 8, 8, 1)).astype(np.float32)
    order = rng.permutation(len(y))
    return tf.data.Dataset.from_tensor_slices((x[order], y[order])).batch(10), x, y


def test_exemplar_sets_are_rebuilt_by_herding_and_reduced_in_order():
    config = digits_config({"memory_size": 12})
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    rng = np.random.default_rng(3)
    ds, x, y = task_dataset(rng, [0, 1], 20)
    model.on_task_begin(0, np.array([0, 1]))
    model.on_task_end(0, ds)
    ex = model.exemplars
    sets = ex.set_id.numpy()
    assert (sets >= 0).sum() == 12 and np.bincount(sets[sets >= 0]).tolist() == [6, 6]  # 12 // 2 sets
    # class 0's exemplars are the herding order of its samples
    members = np.flatnonzero(y == 0)
    feats = model.features(x[members])
    expected = x[members][herding_reference(feats, 6)]
    got = ex.images.numpy()[(sets == 0)][np.argsort(ex.rank.numpy()[sets == 0])]
    np.testing.assert_allclose(got, expected)
    first_task_class0 = got.copy()
    # class means: normalised mean of the exemplars' normalised features
    mu = model.features(got).mean(axis=0)
    np.testing.assert_allclose(ex.class_means.numpy()[0], mu / np.linalg.norm(mu), rtol=1e-5, atol=1e-6)
    assert ex.has_mean.numpy().tolist() == [True, True] + [False] * 8
    # second task: 4 sets, 3 each; the old sets keep their first 3 (herding priority)
    ds, _, _ = task_dataset(rng, [2, 3], 20)
    model.on_task_begin(1, np.array([2, 3]))
    model.on_task_end(1, ds)
    sets = ex.set_id.numpy()
    assert (sets >= 0).sum() == 12
    assert np.bincount(sets[sets >= 0]).tolist() == [3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 3]  # ids task*10+c
    kept = ex.images.numpy()[sets == 0][np.argsort(ex.rank.numpy()[sets == 0])]
    np.testing.assert_allclose(kept, first_task_class0[:3])
    assert ex.old_classes.numpy()[:4].tolist() == [True] * 4
    for a, b in zip(model.old_network.weights, model.network.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_prediction_is_the_nearest_mean_of_exemplars():
    config = digits_config({"memory_size": 20})
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    rng = np.random.default_rng(4)
    ds, x, y = task_dataset(rng, [0, 1], 10)
    model.on_task_begin(0, np.array([0, 1]))
    model.on_task_end(0, ds)
    feats = model.features(x)
    means = model.exemplars.class_means.numpy()[:2]
    expected = np.argmin(((feats[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    log_probs = model.predict_log_probs(tf.constant(x), tf.ones([10], tf.bool)).numpy()
    assert log_probs.argmax(axis=1).tolist() == expected.tolist()
    assert np.all(log_probs[:, 2:] < -1e6)  # classes without exemplars are never predicted
    np.testing.assert_allclose(np.exp(log_probs).sum(axis=1), 1.0, rtol=1e-5)


def test_loss_counts_the_classes_seen_only():
    config = digits_config({"memory_size": 20})
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    rng = np.random.default_rng(5)
    x = rng.uniform(size=(10, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 2, size=10).astype(np.int32)
    model.on_task_begin(0, np.array([0, 1]))
    logits = model(tf.constant(x)).numpy()[:, :2]
    targets = np.eye(2)[y]
    bce = np.maximum(logits, 0) - logits * targets + np.log1p(np.exp(-np.abs(logits)))
    logs = model.learn(tf.constant(x), tf.constant(y))  # empty memory: no replay, no distillation
    assert float(logs["loss"]) == pytest.approx(bce.mean(), rel=1e-5)


def test_loss_distills_old_classes_from_the_previous_network():
    config = digits_config({"memory_size": 20})
    model = methods.build(config, (8, 8, 1), 10)
    model.compile_for_training(config.train)
    rng = np.random.default_rng(6)
    ds, _, _ = task_dataset(rng, [0, 1], 10)
    model.on_task_begin(0, np.array([0, 1]))
    model.learn(*next(iter(ds)))
    model.on_task_end(0, ds)
    model.exemplars.set_id.assign(-np.ones(20, np.int32))  # no replay: only the incoming batch
    model.on_task_begin(1, np.array([2, 3]))
    for v in model.network.trainable_variables:  # the network moves away from the previous one
        v.assign_add(0.1 * rng.normal(size=v.shape).astype(np.float32))
    x = rng.uniform(size=(10, 8, 8, 1)).astype(np.float32)
    y = rng.integers(2, 4, size=10).astype(np.int32)
    old = model.old_network(tf.constant(x)).numpy()[:, :4]
    logits = model(tf.constant(x)).numpy()[:, :4]
    targets = np.concatenate([1 / (1 + np.exp(-old[:, :2])), np.eye(2)[y - 2]], axis=1)
    bce = np.maximum(logits, 0) - logits * targets + np.log1p(np.exp(-np.abs(logits)))
    logs = model.learn(tf.constant(x), tf.constant(y))
    assert float(logs["loss"]) == pytest.approx(bce.mean(), rel=1e-5)


def test_memory_smaller_than_the_sets_is_a_config_error():
    with pytest.raises(ConfigError, match="memory_size"):
        methods.build(digits_config({"memory_size": 5}), (8, 8, 1), 10)


@pytest.mark.slow
def test_learns_split_digits_multi_head(tmp_path):
    results = run(digits_config({"memory_size": 200}, multi_head=True), output_dir=str(tmp_path / "mh"), verbose=0)
    assert results["acc"] > 85.0  # chance: 50% with two classes per task


@pytest.mark.slow
def test_learns_split_digits_single_head(tmp_path):
    results = run(digits_config({"memory_size": 200}), output_dir=str(tmp_path / "sh"), verbose=0)
    assert results["acc"] > 60.0  # chance: 10%; class-incremental
