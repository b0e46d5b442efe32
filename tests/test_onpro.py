"""OnPro: each loss and each piece of APF against numpy transcriptions of the authors' PyTorch code
(weilllllls/OnPro: utils/rotation_transform.py, losses/loss.py, modules/OPE.py, modules/APF.py),
the step's two phases, its state and its replay count, one trace across task boundaries, and a
tiny stream it learns."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from gcl_tf.errors import ConfigError

EPS = 1e-8


# ----------------------------------------------------------------------------- numpy references
def rot_inner_all_np(x):
    """The authors' rot_inner_all on NCHW, op for op (torch's permute / view / rot90 as numpy's)."""
    n, c, h, w = x.shape
    out = np.tile(x, (4, 1, 1, 1))
    a = x.transpose(0, 1, 3, 2).reshape(n, c, 2, h // 2, w)
    s1, s2 = a[:, :, 0], a[:, :, 1]
    s1_1, s2_2 = np.rot90(s1, 2, axes=(2, 3)), np.rot90(s2, 2, axes=(2, 3))

    def join(p, q):
        return np.stack([p, q], axis=2).reshape(n, c, h, w).transpose(0, 1, 3, 2)

    out[n:2 * n], out[3 * n:], out[2 * n:3 * n] = join(s1_1, s2), join(s1, s2_2), join(s1_1, s2_2)
    return out


def rotation_np(x):
    r = rot_inner_all_np(x)
    return np.concatenate([r, np.rot90(r, 2, axes=(2, 3)), np.rot90(r, 1, axes=(2, 3)), np.rot90(r, 3, axes=(2, 3))])


def _nll_and_mask(sim, labels, temperature, exclude_self):
    labels = np.tile(labels, 2)
    sim = sim - sim.max(axis=1, keepdims=True)
    e = np.exp(sim / temperature)
    if exclude_self:
        e = e * (1 - np.eye(len(sim)))
    nll = -np.log(e / (e.sum(axis=1, keepdims=True) + EPS) + EPS)
    mask = (labels[:, None] == labels[None, :]).astype(np.float64)
    return nll, mask / (mask.sum(axis=1, keepdims=True) + EPS)


def nt_xent_n_np(sim, labels, temperature):
    """Supervised_NT_xent_n."""
    b = len(sim) // 2
    nll, mask = _nll_and_mask(sim, labels, temperature, True)
    return 2 * np.sum(mask * nll) / (2 * b) + np.sum(np.diag(nll[:b, b:]) + np.diag(nll[b:, :b])) / (2 * b)


def nt_xent_uni_np(sim, labels, temperature):
    """Supervised_NT_xent_uni."""
    nll, mask = _nll_and_mask(sim, labels, temperature, False)
    return np.sum(mask * nll) / len(sim)


def unit(x):
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def ope_np(z1, z2, labels, num_classes, temperature):
    """OPELoss.forward (cal_prototype over every class, then the prototypes' NT-Xent)."""
    p1, p2 = np.zeros((num_classes, z1.shape[1])), np.zeros((num_classes, z1.shape[1]))
    for i in range(num_classes):
        if np.any(labels == i):
            p1[i], p2[i] = z1[labels == i].mean(axis=0), z2[labels == i].mean(axis=0)
    keep = np.abs(p1).sum(axis=1) > 0
    z = np.concatenate([unit(p1[keep]), unit(p2[keep])])
    c = int(keep.sum())
    logits = z @ z.T / temperature
    logits = logits - logits.max(axis=1, keepdims=True)
    pos = np.zeros((2 * c, 2 * c))
    pos[np.arange(c), np.arange(c) + c] = pos[np.arange(c) + c, np.arange(c)] = 1
    e = np.exp(logits) * (1 - np.eye(2 * c))
    log_prob = logits - np.log(e.sum(axis=1, keepdims=True))
    return -np.mean((pos * log_prob).sum(axis=1) / pos.sum(axis=1)), p1, p2


def random_unit(rng, n, d):
    return unit(rng.normal(size=(n, d)))


# ----------------------------------------------------------------------------- the rotations
def test_rotate_is_the_authors_rotation_copy_for_copy():
    import tensorflow as tf

    from gcl_tf.methods.onpro import rotate, rotation_labels

    x = np.random.default_rng(0).random((3, 6, 6, 2)).astype(np.float32)  # NHWC
    expected = rotation_np(x.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)
    got = rotate(tf.constant(x), 16).numpy()
    assert got.shape == (48, 6, 6, 2)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(rotate(tf.constant(x), 4).numpy(), expected.reshape(16, 3, 6, 6, 2)[::4].reshape(
        12, 6, 6, 2))  # the image turned: copies 0, 4, 8, 12 of the 16
    np.testing.assert_array_equal(rotate(tf.constant(x), 1).numpy(), x)
    labels = rotation_labels(tf.constant([2, 0, 1]), 16, 10).numpy()
    np.testing.assert_array_equal(labels, np.concatenate([np.array([2, 0, 1]) + 10 * i for i in range(16)]))


def test_the_inner_turn_by_hand():
    """A 2x2 image [[a, b], [c, d]]: its left column turned 180 degrees is [[c, b], [a, d]]."""
    import tensorflow as tf

    from gcl_tf.methods.onpro import rotate

    x = tf.constant([[[[1.0], [2.0]], [[3.0], [4.0]]]])
    got = rotate(x, 16).numpy()[:4, ..., 0]
    np.testing.assert_array_equal(got, [[[1, 2], [3, 4]], [[3, 2], [1, 4]], [[3, 4], [1, 2]], [[1, 4], [3, 2]]])


# ----------------------------------------------------------------------------- the instance contrast
def test_contrast_similarity_by_hand():
    import tensorflow as tf

    from gcl_tf.methods.onpro import contrast_similarity

    rng = np.random.default_rng(1)
    z, f = random_unit(rng, 6, 3), random_unit(rng, 6, 7)
    got = contrast_similarity(tf.constant(z, tf.float32), tf.constant(f, tf.float32), tf.constant(2), 0.5)
    np.testing.assert_allclose(got.numpy(), 0.5 * (z @ f[:, 2:5].T + z @ z.T), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("uni", [False, True])
def test_the_instance_losses_are_ocms(uni):
    import tensorflow as tf

    from gcl_tf.methods.onpro import nt_xent, nt_xent_uni

    rng = np.random.default_rng(2)
    b = 8
    z = random_unit(rng, 2 * b, 5)
    sim = z @ z.T + 0.3 * rng.normal(size=(2 * b, 2 * b))
    labels = np.array([0, 1, 0, 2, 1.5, 1, 0, 3], np.float32)  # a mixed label (1.5) has only itself
    ours, reference = (nt_xent_uni, nt_xent_uni_np) if uni else (nt_xent, nt_xent_n_np)
    got = ours(tf.constant(sim, tf.float32), tf.constant(labels), 0.07)
    np.testing.assert_allclose(float(got), reference(sim, labels, 0.07), rtol=1e-5)

    # Masked samples leave the loss of the others exactly as if they were not there.
    valid = np.array([1, 1, 0, 1, 1, 0, 1, 1], bool)
    keep = np.concatenate([np.flatnonzero(valid), b + np.flatnonzero(valid)])
    got = ours(tf.constant(sim, tf.float32), tf.constant(labels), 0.07, tf.constant(valid))
    np.testing.assert_allclose(float(got), reference(sim[keep][:, keep], labels[valid], 0.07), rtol=1e-5)


# ----------------------------------------------------------------------------- OPE
def test_ope_is_the_authors_and_masks_samples():
    import tensorflow as tf

    from gcl_tf.methods.onpro import ope_loss

    rng = np.random.default_rng(3)
    z1, z2 = random_unit(rng, 9, 4), random_unit(rng, 9, 4)
    labels = np.array([0, 2, 2, 5, 0, 5, 2, 3, 3])
    loss, p1, p2 = ope_loss(tf.constant(z1, tf.float32), tf.constant(z2, tf.float32), tf.constant(labels),
                            tf.ones([9]), 6, 0.5)
    expected, e1, e2 = ope_np(z1, z2, labels, 6, 0.5)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    np.testing.assert_allclose(p1.numpy(), e1, rtol=1e-5, atol=1e-6)  # zeros for the absent classes
    np.testing.assert_allclose(p2.numpy(), e2, rtol=1e-5, atol=1e-6)

    weights = np.array([1, 1, 0, 1, 0, 1, 1, 0, 0], np.float32)  # class 3 drops out
    loss, _, _ = ope_loss(tf.constant(z1, tf.float32), tf.constant(z2, tf.float32), tf.constant(labels),
                          tf.constant(weights), 6, 0.5)
    kept = weights > 0
    np.testing.assert_allclose(float(loss), ope_np(z1[kept], z2[kept], labels[kept], 6, 0.5)[0], rtol=1e-5)
    none, _, _ = ope_loss(tf.constant(z1, tf.float32), tf.constant(z2, tf.float32), tf.constant(labels),
                          tf.zeros([9]), 6, 0.5)
    assert float(none) == 0.0


def test_ope_gradients_are_finite_with_absent_classes():
    import tensorflow as tf

    from gcl_tf.methods.onpro import ope_loss

    z = tf.Variable(random_unit(np.random.default_rng(4), 6, 3).astype(np.float32))
    with tf.GradientTape() as tape:
        loss, _, _ = ope_loss(z, z * 0.5 + 0.1, tf.constant([0, 0, 1, 1, 3, 3]), tf.ones([6]), 8, 0.5)
    assert np.all(np.isfinite(tape.gradient(loss, z).numpy()))


# ----------------------------------------------------------------------------- APF
def test_pair_probabilities_are_the_softmax_of_inverse_distances():
    import tensorflow as tf

    from gcl_tf.methods.onpro import pair_probabilities

    rng = np.random.default_rng(5)
    means = rng.normal(size=(5, 3)).astype(np.float32)
    means[2] = 0  # a class without a mean
    got = pair_probabilities(tf.constant(means)).numpy()
    present = [0, 1, 3, 4]
    pairs = [(i, j) for n, i in enumerate(present) for j in present[n + 1:]]  # itertools.combinations' order
    inverse = np.array([1 / np.linalg.norm(means[i] - means[j]) for i, j in pairs])
    softmax = np.exp(inverse - inverse.max()) / np.exp(inverse - inverse.max()).sum()
    expected = np.zeros((5, 5))
    for (i, j), p in zip(pairs, softmax):
        expected[i, j] = p
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def test_pair_counts_round_then_spread_the_difference():
    import tensorflow as tf

    from gcl_tf.methods.onpro import pair_counts, pair_of_position

    p = np.zeros((3, 3), np.float32)
    p[0, 1], p[0, 2], p[1, 2] = 0.5, 0.3, 0.2
    # total 3: rounded (to even) 2, 1, 1 = 4, so one pair holding some loses one
    for seed in range(6):
        counts = pair_counts(tf.constant(p), tf.constant(3), tf.constant([seed, 1])).numpy()
        assert counts.sum() == 3 and counts[np.tril_indices(3)].sum() == 0
        assert sorted([counts[0, 1], counts[0, 2], counts[1, 2]]) in ([1, 1, 1], [0, 1, 2])
    # total 4: rounded 2, 1, 1 (0.8 -> 1): nothing to spread
    np.testing.assert_array_equal(pair_counts(tf.constant(p), tf.constant(4), tf.constant([0, 1])).numpy(),
                                  [[0, 2, 1], [0, 0, 1], [0, 0, 0]])
    # total 2: rounded 1, 1, 0 (0.4 -> 0) = 2
    np.testing.assert_array_equal(pair_counts(tf.constant(p), tf.constant(2), tf.constant([0, 1])).numpy(),
                                  [[0, 1, 1], [0, 0, 0], [0, 0, 0]])
    # total 7: rounded 4 (3.5 to even), 2, 1 (1.4) = 7
    counts = pair_counts(tf.constant(p), tf.constant(7), tf.constant([0, 1]))
    np.testing.assert_array_equal(counts.numpy(), [[0, 4, 2], [0, 0, 1], [0, 0, 0]])
    # the positions take the pairs in order, each as many times as it holds
    np.testing.assert_array_equal(pair_of_position(counts, 7).numpy(), [1, 1, 1, 1, 2, 2, 5])


def test_pair_counts_add_only_to_pairs_that_can_be_drawn():
    import tensorflow as tf

    from gcl_tf.methods.onpro import pair_counts

    p = np.zeros((4, 4), np.float32)
    p[0, 1] = p[0, 3] = p[1, 3] = 1 / 3  # class 2 has no mean
    for seed in range(5):
        counts = pair_counts(tf.constant(p), tf.constant(5), tf.constant([seed, 2])).numpy()  # 2 + 2 + 2: one loses
        assert counts.sum() == 5 and counts[:, 2].sum() == counts[2].sum() == 0
        assert counts[np.tril_indices(4)].sum() == 0


def test_random_mixup_mixes_the_counted_rows_among_themselves():
    import tensorflow as tf

    from gcl_tf.methods.onpro import random_mixup

    for seed in range(8):
        partner, weight = random_mixup(10, tf.constant(6), 1.0, 0.1, 0.6, tf.constant([seed, 3]))
        partner, weight = partner.numpy(), weight.numpy()
        assert sorted(partner[:6]) == list(range(6)) and list(partner[6:]) == [6, 7, 8, 9]
        assert np.all((weight[:6] >= 0.1) & (weight[:6] <= 0.6)) and np.all(weight[6:] == 0)
    _, weight = random_mixup(10, tf.constant(6), 0.0, 0.1, 0.6, tf.constant([0, 3]))
    assert np.all(weight.numpy() == 0)
    # p = 0.6: 0.6 of the batches mix, and in them 0.6 of the rows
    mixed = [random_mixup(200, tf.constant(200), 0.6, 0.0, 0.6, tf.constant([s, 4]))[1].numpy() > 0
             for s in range(60)]
    batches = [m.any() for m in mixed]
    assert 0.35 < np.mean(batches) < 0.85
    assert 0.5 < np.mean([m.mean() for m, b in zip(mixed, batches) if b]) < 0.7


def test_mixup_cross_entropy_and_pick_slots():
    import tensorflow as tf

    from gcl_tf.methods.onpro import mixup_cross_entropy, pick_slots

    logits = np.array([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0], [1.0, 2.0, 0.0]], np.float32)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    first, second, w, rows = np.array([0, 2, 1]), np.array([1, 0, 1]), np.array([0.3, 0.0, 0.5]), np.array([1, 1, 0])
    per = -(1 - w) * logp[np.arange(3), first] - w * logp[np.arange(3), second]
    got = mixup_cross_entropy(tf.constant(logits), tf.constant(first), tf.constant(second),
                              tf.constant(w, tf.float32), tf.constant(rows, tf.float32))
    np.testing.assert_allclose(float(got), per[:2].mean(), rtol=1e-6)

    labels = tf.constant([3, 1, 3, 0, 1, 9])
    filled = tf.constant([True, True, True, True, True, False])
    for seed in range(5):
        slots = pick_slots(labels, filled, tf.constant([3, 1, 0, 7]), tf.constant([seed, 5])).numpy()
        assert slots[0] in (0, 2) and slots[1] in (1, 4) and slots[2] == 3 and slots[3] < 5  # 7: any stored


# ----------------------------------------------------------------------------- the method
def tiny_onpro(backbone="linear", **keys):
    """OnPro on 8x8x1 images, 4 classes; ``backbone`` "linear": a flatten (64 features), None: the MLP."""
    import keras

    import gcl_tf

    from helpers import linear_backbone

    settings = dict(num_classes=4, input_shape=(8, 8, 1), batch_size=4, seed=1, memory_size=24,
                    replay_batch_size=12, replay_per_class=2, projection_size=8, rotations=4)
    settings.update(keys)
    model = gcl_tf.OnPro(linear_backbone((8, 8, 1)) if backbone == "linear" else backbone, **settings)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    return model


def levels(n, classes, seed):
    """``n`` 8x8 images of each class in ``classes``: class c is brightness (c + 1) / 5 with noise."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.array(classes), n)
    x = (y[:, None, None, None] + 1) / 5.0 + 0.05 * rng.normal(size=(len(y), 8, 8, 1))
    order = rng.permutation(len(y))
    return np.clip(x[order], 0, 1).astype(np.float32), y[order].astype(np.int32)


def counting_step(model):
    import tensorflow as tf

    traces = []

    @tf.function
    def step(x, y):
        traces.append(1)
        return model.train_step((x, y))

    return step, traces


def test_bad_keywords_are_config_errors_naming_what_is_allowed():
    import gcl_tf

    with pytest.raises(ConfigError, match="projection_size: 64 is not below .* 64.*allowed: 1 to 63"):
        tiny_onpro(projection_size=64)
    with pytest.raises(ConfigError, match="square images"):
        gcl_tf.OnPro(num_classes=4, input_shape=(8, 6, 1), projection_size=8)
    with pytest.raises(ConfigError, match="even width"):
        gcl_tf.OnPro(num_classes=4, input_shape=(7, 7, 1), projection_size=8)
    gcl_tf.OnPro(num_classes=4, input_shape=(7, 7, 1), projection_size=8, rotations=4)
    with pytest.raises(ConfigError, match="rotations.*allowed: 1, 4, 16"):
        tiny_onpro(rotations=8)
    with pytest.raises(ConfigError, match="mixup_lower.*allowed: a range"):
        tiny_onpro(mixup_lower=0.7)


def test_views_are_the_authors_transform_or_the_runs_augmentation():
    """``views: authors`` (the default) draws every view from the authors' transform whatever
    ``augment`` says; ``views: protocol`` from the run's in-step augmentation; a compiled step runs
    with either; ``protocol`` without an in-step augmentation is a one-line error, from Python and
    from a config, before TensorFlow builds anything."""
    import tensorflow as tf

    from gcl_tf.augment import augment
    from gcl_tf.config import load_config
    from gcl_tf.methods.onpro import authors_transform

    from conftest import REPO

    x, y = levels(2, [0, 1], 3)
    seed = tf.constant([4, 2])
    theirs = tiny_onpro(augment="crop_flip")
    ours = tiny_onpro(augment="crop_flip", views="protocol")
    np.testing.assert_array_equal(theirs.view(x, seed), authors_transform(x, seed))
    np.testing.assert_array_equal(ours.view(x, seed), augment(x, "crop_flip", seed))
    assert not np.array_equal(ours.view(x, seed), theirs.view(x, seed))
    for model in (theirs, ours):
        model.on_task_begin(0, [0, 1])
        step, traces = counting_step(model)
        losses = [float(step(tf.constant(x[:4]), tf.constant(y[:4]))["loss"]) for _ in range(2)]
        assert np.all(np.isfinite(losses)) and len(traces) == 1
    with pytest.raises(ConfigError, match=r"method.views: protocol .* 'none'; allowed: views: authors"):
        tiny_onpro(views="protocol")
    today = os.path.join(REPO, "configs", "split_cifar10_ocl.yaml")
    assert load_config(today, ["method.name=onpro", "method.views=protocol"]).method.views == "protocol"
    with pytest.raises(ConfigError, match=r"benchmark.augment is 'flip'; allowed") as info:
        load_config(today, ["method.name=onpro", "method.views=protocol", "benchmark.augment=flip"])
    assert "\n" not in str(info.value)


def test_one_trace_two_phases_the_replay_count_and_the_state(monkeypatch):
    """Steps of task 0 then task 1 through one compiled step: it traces once; the first task
    takes the first-task branch; the replay count is min(draws, 2 x classes seen, stored); APF
    waits for task 1's second step; classes seen and class means are kept."""
    import tensorflow as tf

    from gcl_tf.methods import onpro

    record = tf.Variable([-1, -1, -1])  # [branch, replay count, apf]
    first, later = onpro.OnPro.first_task_terms, onpro.OnPro.later_task_terms

    def first_task_terms(self, x, y, images, labels, filled):
        record.assign(tf.stack([0, filled, 0]))
        return first(self, x, y, images, labels, filled)

    def later_task_terms(self, x, y, images, labels, counted, apf):
        record.assign(tf.stack([1, counted, tf.cast(apf, tf.int32)]))
        return later(self, x, y, images, labels, counted, apf)

    contrast, contrasts = onpro.OnPro.contrast, []

    def recorded_contrast(self, z, features, labels, seed, scale, loss=onpro.nt_xent, valid=None):
        contrasts.append((scale, loss.__name__, valid is None))  # as each branch is traced
        return contrast(self, z, features, labels, seed, scale, loss, valid)

    monkeypatch.setattr(onpro.OnPro, "contrast", recorded_contrast)
    monkeypatch.setattr(onpro.OnPro, "first_task_terms", first_task_terms)
    monkeypatch.setattr(onpro.OnPro, "later_task_terms", later_task_terms)
    model = tiny_onpro()
    step, traces = counting_step(model)
    seen = []
    model.on_task_begin(0, [0, 1])
    x, y = levels(8, [0, 1], 0)
    for i in range(4):
        step(tf.constant(x[4 * i:4 * i + 4]), tf.constant(y[4 * i:4 * i + 4]))
        seen.append(record.numpy().tolist())
    assert seen == [[0, 0, 0], [0, 4, 0], [0, 8, 0], [0, 12, 0]]  # the whole memory up to 12 draws
    assert model.seen_classes.numpy().tolist() == [1, 1, 0, 0] and int(model.last_task.numpy()) == 0
    means = model.class_means.numpy()
    assert np.all(np.abs(means[:2]).sum(axis=1) > 0) and np.all(means[2:] == 0)
    model.on_task_begin(1, [2, 3])
    x, y = levels(8, [2, 3], 1)
    for i in range(3):
        step(tf.constant(x[4 * i:4 * i + 4]), tf.constant(y[4 * i:4 * i + 4]))
        seen.append(record.numpy().tolist())
    classes = 2 + len(set(y[:4].tolist()))
    assert seen[4] == [1, min(12, 2 * classes), 0]  # the task's first step: no APF
    assert seen[5][:1] == [1] and seen[5][2] == 1 and seen[6][2] == 1
    assert len(traces) == 1
    assert np.all(np.abs(model.class_means.numpy()).sum(axis=1) > 0)
    # the first task's contrast of x without sim_lambda; then x's (n) and the replay's (uni, masked) with it
    assert contrasts == [(1.0, "nt_xent", True), (0.5, "nt_xent", True), (0.5, "nt_xent_uni", False)]


def test_feedback_mixes_the_base_share_and_close_classes():
    import tensorflow as tf

    model = tiny_onpro(mixup_p=1.0, mixup_lower=0.2, mixup_upper=0.5, replay_batch_size=12)
    x, y = levels(6, [0, 1, 2, 3], 2)
    model.memory.add(tf.constant(x), tf.constant(y))
    model.class_means.assign(np.eye(4, 8, dtype=np.float32) * np.array([[1], [1.1], [5], [9]], np.float32))
    images, labels = tf.constant(x[:12]), tf.constant(y[:12])
    off = model.feedback(images, labels, tf.constant(10), tf.constant(False))
    np.testing.assert_array_equal(off[0].numpy(), x[:12])
    assert np.all(off[3].numpy() == 0) and np.all(off[1].numpy() == y[:12])
    mixed, first, second, w = [v.numpy() for v in model.feedback(images, labels, tf.constant(10), tf.constant(True))]
    base = 7  # floor(0.75 * 10)
    assert np.all(w[base:10] >= 0) and np.all(w[10:] == 0) and np.all(first[10:] == y[10:12])
    np.testing.assert_array_equal(mixed[10:], x[10:12])  # past the count: as drawn
    # the base share mixes among the first 7 draws; its weights are in [0.2, 0.5] or 0 (batch not mixed)
    assert np.all((w[:base] == 0) | ((w[:base] >= 0.2) & (w[:base] <= 0.5)))
    assert set(second[:base].tolist()) <= set(y[:base].tolist())
    # the close share: pairs first < second of classes with means; classes 0 and 1 are the closest
    assert np.all(first[base:10] < second[base:10])
    # each close row mixes a stored sample of its first class with one of its second
    stored, stored_labels = model.memory.images.numpy().reshape(24, -1), model.memory.labels.numpy()
    for i in range(base, 10):
        a, b = stored[stored_labels == first[i]], stored[stored_labels == second[i]]
        mixes = (1 - w[i]) * a[:, None] + w[i] * b[None, :]
        assert np.min(np.abs(mixes - mixed[i].reshape(-1)).max(axis=-1)) < 1e-5
    assert np.mean([(first[i], second[i]) == (0, 1) for i in range(base, 10)]) >= 1 / 3


@pytest.mark.slow
def test_it_learns_a_tiny_stream():
    """Digits 0, 1 then 2, 3 (60 images each, four passes): the first task's cross-entropy falls,
    and at the end the four classes are told apart (in later tasks the classifier learns from the
    memory only, as in the authors' code)."""
    import tensorflow as tf
    from sklearn.datasets import load_digits

    digits = load_digits()
    images, labels = (digits.images / 16.0).astype(np.float32)[..., None], digits.target.astype(np.int32)
    model = tiny_onpro(backbone=None, memory_size=40, replay_batch_size=16, projection_size=16)
    model.optimizer.learning_rate.assign(0.003)
    step, traces = counting_step(model)
    ce = []
    for task, classes in enumerate([[0, 1], [2, 3]]):
        model.on_task_begin(task, classes)
        index = np.flatnonzero(np.isin(labels[:1000], classes))[:60]
        for _ in range(4):
            for i in range(0, 60, 4):
                logs = step(tf.constant(images[index[i:i + 4]]), tf.constant(labels[index[i:i + 4]]))
                ce.append(float(logs["loss_ce"]))
    assert np.mean(ce[50:60]) < 0.5 * np.mean(ce[:5]), ce
    test = 1000 + np.flatnonzero(np.isin(labels[1000:], [0, 1, 2, 3]))
    accuracy = np.mean(np.argmax(model.predict(images[test], verbose=0), axis=1) == labels[test])
    assert accuracy > 0.7 and len(traces) == 1, accuracy
