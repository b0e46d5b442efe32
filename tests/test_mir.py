"""MIR: the interference scores and the choice of the replay batch against a hand computation
(numpy, a linear classifier), the update that follows, and a run on the quickstart's digits stream."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from helpers import linear_backbone, output_weights, quickstart_twice

K, LR = 4, 0.5


def linear_mir(memory_size=6, candidates=4, replay=2, seed=1):
    """MIR on 2x2 images whose classifier is linear: logits = flatten(x) @ W + b."""
    import keras

    import gcl_tf

    model = gcl_tf.MIR(linear_backbone((2, 2, 1)), num_classes=K, input_shape=(2, 2, 1), memory_size=memory_size,
                       candidates=candidates, replay_batch_size=replay, batch_size=3, seed=seed)
    model.compile(optimizer=keras.optimizers.SGD(LR))
    return model


def cross_entropy_and_grad(z, y, weights=None):
    """Per-sample cross-entropy of logits ``z`` [n, K] and the gradient of their weighted mean
    (weights: ones by default) with respect to ``z``."""
    weights = np.ones(len(y)) if weights is None else weights
    e = np.exp(z - z.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    return -np.log(p[np.arange(len(y)), y]), weights[:, None] * (p - np.eye(K)[y]) / weights.sum()


def sgd(W, b, x, dz, rate):
    return W - rate * x.T @ dz, b - rate * dz.sum(axis=0)


def mir_choice(W, b, x, y, xm, ym, ok, k):
    """By hand: the virtual SGD step on the batch, each candidate's loss before and after it, and
    the ``k`` candidates whose loss rises most (drawn slots only)."""
    x, xm = x.reshape(len(x), 4), xm.reshape(len(xm), 4)
    _, dz = cross_entropy_and_grad(x @ W + b, y)
    W2, b2 = sgd(W, b, x, dz, LR)
    before, _ = cross_entropy_and_grad(xm @ W + b, ym)
    after, _ = cross_entropy_and_grad(xm @ W2 + b2, ym)
    scores = np.where(ok, after - before, -np.inf)
    return np.argsort(-scores, kind="stable")[:k], scores


def test_scores_and_choice_by_hand():
    import tensorflow as tf

    from gcl_tf.methods.mir import interference, most_interfered

    scores = interference(tf.constant([1.0, 2.0, 3.0, 4.0]), tf.constant([2.0, 2.0, 5.0, 9.0]),
                          tf.constant([True, True, True, False]))
    np.testing.assert_array_equal(scores.numpy(), [1.0, 0.0, 2.0, -np.inf])  # the undrawn slot never wins
    np.testing.assert_array_equal(most_interfered(scores, 2).numpy(), [2, 0])


def test_the_replay_batch_is_the_most_interfered_candidates_and_the_update_is_ers():
    import tensorflow as tf

    model = linear_mir()
    rng = np.random.default_rng(3)
    batches = [(rng.uniform(size=(3, 2, 2, 1)).astype(np.float32), rng.integers(0, K, 3).astype(np.int32))
               for _ in range(6)]
    not_the_random_draw = 0
    for i, (x, y) in enumerate(batches):
        W, b = output_weights(model)
        drawn = {name: value.numpy() for name, value in model.memory.sample(4, model.step_counter.numpy()).items()}
        assert drawn["ok"].sum() == min(4, 3 * i)  # the memory fills 3 samples a step
        expected, scores = mir_choice(W, b, x, y, drawn["images"], drawn["labels"], drawn["ok"], 2)
        chosen = model.retrieve(tf.constant(x), tf.constant(y), 2)
        np.testing.assert_array_equal(chosen["slots"].numpy(), drawn["slots"][expected])
        if drawn["ok"].all():
            assert scores[expected[0]] > scores[expected[1]] > -np.inf  # no near tie decides the test
            not_the_random_draw += set(expected) != {0, 1}  # ER would replay the draw's first two
        # ER's update on the batch and the chosen samples (those drawn), one weighted mean
        ok = drawn["ok"][expected].astype(np.float64)
        xs = np.concatenate([x, drawn["images"][expected]]).reshape(5, 4)
        ys = np.concatenate([y, drawn["labels"][expected]])
        weights = np.concatenate([np.ones(3), ok])
        losses, dz = cross_entropy_and_grad(xs @ W + b, ys, weights)
        W2, b2 = sgd(W, b, xs, dz, LR)
        logs = model.train_step((tf.constant(x), tf.constant(y)))
        assert float(logs["loss"]) == pytest.approx((weights * losses).sum() / weights.sum(), rel=1e-5)
        new_W, new_b = output_weights(model)
        np.testing.assert_allclose(new_W, W2, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(new_b, b2, rtol=1e-5, atol=1e-6)
    assert not_the_random_draw >= 1
    assert int(model.memory.num_seen.numpy()) == 18


def test_the_virtual_step_reads_the_optimizers_current_learning_rate():
    """A learning rate set after compiling (a resumed run with a new one) sizes the virtual step."""
    import tensorflow as tf

    model = linear_mir()
    x = tf.random.stateless_uniform([3, 2, 2, 1], seed=[1, 2])
    y = tf.constant([0, 1, 2])
    step = tf.function(lambda: model.virtual_step(x, y))
    before, after = step()
    model.optimizer.learning_rate.assign(2 * LR)
    before, after_twice = step()
    for w, a, a2 in zip(before, after, after_twice):
        np.testing.assert_allclose((a2 - w).numpy(), 2 * (a - w).numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_learns_the_quickstart_digits_stream_with_its_preset(tmp_path):
    """The quickstart's permuted digits (5 tasks), MIR with its preset (ER's memory and learning
    rate): well above Finetune, which forgets (48.7 with seed 0), and deterministic."""
    config, results = quickstart_twice("mir", tmp_path)
    assert config.method.memory_size == 200 and config.train.learning_rate == 0.1
    assert results["acc"] > 65.0, results["accuracy_matrix"]  # chance: 10
