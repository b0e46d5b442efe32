"""DER++: one update against a hand computation (numpy, a linear classifier), the logits it
stores, and a run on the quickstart's digits stream."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from helpers import linear_backbone, output_weights, quickstart_twice

K, LR, ALPHA, BETA = 3, 0.5, 0.3, 0.7


def linear_derpp(memory_size=6, replay=2, one_pass=False, seed=4):
    """DER++ on 2x2 images whose classifier is linear: logits = flatten(x) @ W + b."""
    import keras

    import gcl_tf

    backbone = linear_backbone((2, 2, 1))
    model = gcl_tf.DERPP(backbone, num_classes=K, input_shape=(2, 2, 1), memory_size=memory_size,
                         replay_batch_size=replay, one_pass=one_pass, alpha=ALPHA, beta=BETA, batch_size=3, seed=seed)
    model.compile(optimizer=keras.optimizers.SGD(LR))
    return model


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def cross_entropy_and_grad(z, y):
    """Mean cross-entropy of logits ``z`` [n, K] and its gradient with respect to ``z``."""
    p, onehot = softmax(z), np.eye(K)[y]
    return -np.mean(np.log(p[np.arange(len(y)), y])), (p - onehot) / len(y)


def derpp_step(W, b, x, y, x1, stored1, x2, y2):
    """The DER++ loss and the weights after one SGD step, by hand: CE(x, y) + ALPHA * MSE(logits of
    x1, stored1) + BETA * CE(x2, y2) (means over samples, the MSE also over classes)."""
    x, x1, x2 = (a.reshape(len(a), 4) for a in (x, x1, x2))
    loss, dz = cross_entropy_and_grad(x @ W + b, y)
    pairs = [(x, dz)]
    if len(x1):
        diff = x1 @ W + b - stored1
        loss += ALPHA * np.mean(diff ** 2)
        pairs.append((x1, ALPHA * 2 * diff / diff.size))
        ce2, dz2 = cross_entropy_and_grad(x2 @ W + b, y2)
        loss += BETA * ce2
        pairs.append((x2, BETA * dz2))
    grad_W = sum(a.T @ d for a, d in pairs)
    grad_b = sum(d.sum(axis=0) for _, d in pairs)
    return loss, W - LR * grad_W, b - LR * grad_b


@pytest.mark.parametrize("one_pass", [False, True])  # the same update without BatchNorm
def test_one_update_matches_the_hand_computation_and_stores_the_logits_before_it(one_pass):
    import tensorflow as tf

    from gcl_tf import salts

    model = linear_derpp(one_pass=one_pass)
    rng = np.random.default_rng(0)
    batches = [(rng.uniform(size=(3, 2, 2, 1)).astype(np.float32), rng.integers(0, K, 3).astype(np.int32))
               for _ in range(5)]
    for i, (x, y) in enumerate(batches):
        W, b = output_weights(model)
        memory = {f: v.numpy() for f, v in model.memory.fields().items()}
        step = model.step_counter.numpy()
        incoming = model.memory.reservoir_slots(3).numpy()  # where this batch will go
        first = model.memory.sample(2, step, salts.REPLAY)
        second = model.memory.sample(2, step, salts.SECOND_REPLAY)
        s1, s2 = (d["slots"].numpy()[d["ok"].numpy()] for d in (first, second))
        if i == 0:
            assert len(s1) == len(s2) == 0  # an empty memory: the stream's cross-entropy alone
        else:
            assert len(s1) == len(s2) == 2
        expected_loss, expected_W, expected_b = derpp_step(
            W, b, x, y, memory["images"][s1], memory["logits"][s1], memory["images"][s2], memory["labels"][s2])
        logs = model.train_step((tf.constant(x), tf.constant(y)))
        assert float(logs["loss"]) == pytest.approx(expected_loss, rel=1e-5)
        new_W, new_b = output_weights(model)
        np.testing.assert_allclose(new_W, expected_W, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(new_b, expected_b, rtol=1e-5, atol=1e-6)
        kept = incoming >= 0  # each stored sample's logits are those before the update
        logits_before = x.reshape(3, -1) @ W + b
        np.testing.assert_allclose(model.memory.logits.numpy()[incoming[kept]], logits_before[kept], rtol=1e-5)
        np.testing.assert_array_equal(model.memory.labels.numpy()[incoming[kept]], y[kept])
    assert int(model.memory.num_seen.numpy()) == 15 and int(model.memory.num_filled.numpy()) == 6
    assert not np.array_equal(s1, s2)  # two independent replay batches (the last step's)


@pytest.mark.slow
def test_learns_the_quickstart_digits_stream_with_its_preset(tmp_path):
    """The quickstart's permuted digits (5 tasks), DER++ with its preset: well above Finetune,
    which forgets (48.7 with seed 0), and deterministic."""
    config, results = quickstart_twice("derpp", tmp_path)
    assert config.method.memory_size == 200 and config.method.alpha == 1.0
    assert results["acc"] > 65.0, results["accuracy_matrix"]  # chance: 10


def test_forward_in_one_pass_normalises_every_batch_by_the_statistics_of_them_all():
    """gcl_tf.methods.replay.forward on a BatchNorm layer (momentum 0: its moving mean becomes the last
    batch's): the authors' way normalises each batch by its own mean and leaves the last batch's
    statistics; one pass normalises by the joint mean and leaves it."""
    import keras
    import tensorflow as tf

    from gcl_tf.methods.replay import forward

    norm = keras.layers.BatchNormalization(momentum=0.0, epsilon=0.0, center=False, scale=False)
    model = keras.Sequential([keras.Input((2,)), norm])
    a = tf.constant([[0.0, 1.0], [2.0, 3.0]])
    b = tf.constant([[10.0, 1.0], [10.0, 5.0], [10.0, 9.0]])
    joint = tf.concat([a, b], axis=0)
    split = [t.numpy() for t in forward(model, [a, b], one_pass=False)]
    np.testing.assert_allclose(split[0][:, 0], [-1.0, 1.0], atol=1e-5)  # by a's own mean and variance
    np.testing.assert_allclose(norm.moving_mean.numpy(), b.numpy().mean(axis=0), rtol=1e-6)
    first, second = (t.numpy() for t in forward(model, [a, b], one_pass=True))
    assert first.shape == (2, 2) and second.shape == (3, 2)
    mean, std = joint.numpy().mean(axis=0), joint.numpy().std(axis=0)
    np.testing.assert_allclose(np.concatenate([first, second]), (joint.numpy() - mean) / std, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(norm.moving_mean.numpy(), mean, rtol=1e-6)
