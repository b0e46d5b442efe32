"""CBRS (class-balancing reservoir sampling): its memory against the paper's Algorithm 1 on a
stream small enough to follow by hand, a batch inserted as its samples one by one, a class-balanced
memory on an imbalanced stream where ER's reservoir keeps the stream's imbalance (the memory alone,
and inside the compiled step), and a run on the quickstart's digits stream."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from helpers import linear_backbone, quickstart_twice


def cbrs_memory(capacity, num_classes, seed=0):
    from gcl_tf.methods.cbrs import ClassBalancedMemory

    return ClassBalancedMemory(capacity, (1,), num_classes, seed=seed)


def insert(memory, labels, first=0, batch=None):
    """Stream ``labels`` into ``memory`` in batches of ``batch`` (all at once: None); each image is
    its sample's index in the stream (from ``first``)."""
    labels = np.asarray(labels, np.int32)
    batch = batch or len(labels)
    for start in range(0, len(labels), batch):
        part = labels[start:start + batch]
        memory.add(np.arange(first + start, first + start + len(part), dtype=np.float32)[:, None], part)


def counts(memory, num_classes):
    return np.bincount(memory.labels.numpy()[:int(memory.num_filled.numpy())], minlength=num_classes)


def test_the_papers_algorithm_on_a_stream_followed_by_hand():
    """Memory 4: four 0s fill it (0 becomes full); a 1 replaces a 0 (1 is not full), a second 1
    another 0 (2 and 2: both full now); a 2 replaces a sample of a largest class, 0 or 1; then 2 is
    not full (largest: 2), so a second 2 also replaces one of the largest. With 0 and 1 full at two
    samples each, a third 1 replaces a stored 1 with probability m/n = 2/3 (reservoir sampling within
    its class)."""
    memory = cbrs_memory(4, 3)
    insert(memory, [0, 0, 0, 0, 1, 1, 2])
    assert sorted(counts(memory, 3)) == [1, 1, 2] and counts(memory, 3)[2] == 1
    assert memory.full.numpy().tolist() == [True, True, False] and memory.seen.numpy().tolist() == [4, 2, 1]
    insert(memory, [2], first=7)
    assert counts(memory, 3).tolist() == [1, 1, 2]  # one of the largest went: 0 and 1 end at one sample
    stored = dict(zip(memory.images.numpy()[:, 0].astype(int), memory.labels.numpy()))
    assert all(label == [0, 0, 0, 0, 1, 1, 2, 2][i] for i, label in stored.items())  # each image with its label
    kept = 0
    for seed in range(200):
        memory = cbrs_memory(4, 3, seed)
        insert(memory, [0, 0, 1, 1, 1])  # 0 and 1 full at 2 and 2; the third 1: kept with p = 2/3
        kept += counts(memory, 3)[1] == 2 and 4 in memory.images.numpy()[:, 0]
    assert 110 < kept < 155, kept  # 2/3 of 200 = 133 (binomial s.d. 6.7)


def test_a_batch_is_inserted_as_its_samples_one_by_one():
    """One batch of 30 or 30 batches of one: the same memory (a later sample of a batch that
    replaces an earlier one of it keeps its slot)."""
    labels = np.random.default_rng(0).choice(4, size=30, p=[0.7, 0.2, 0.07, 0.03])
    at_once, one_by_one = cbrs_memory(8, 4), cbrs_memory(8, 4)
    insert(at_once, labels)
    insert(one_by_one, labels, batch=1)
    for name in ("images", "labels", "seen", "full", "num_seen", "num_filled"):
        np.testing.assert_array_equal(getattr(at_once, name).numpy(), getattr(one_by_one, name).numpy(), name)


def imbalanced_stream(sizes, seed=0):
    labels = np.concatenate([np.full(n, c, np.int32) for c, n in enumerate(sizes)])
    return np.random.default_rng(seed).permutation(labels)


def test_the_memory_stays_class_balanced_where_the_reservoir_keeps_the_imbalance():
    """750 samples of 5 classes, 400 to 12 of each, into 50 slots: CBRS ends with 10 of each class
    (50 / 5; the rarest keeps 10 of its 12), ER's reservoir with each class's share of the stream
    (26.7 expected of the first, 0.8 of the last)."""
    from gcl_tf.memory import ReservoirMemory

    sizes, labels = [400, 200, 100, 38, 12], imbalanced_stream([400, 200, 100, 38, 12])
    balanced, reservoir = cbrs_memory(50, 5), ReservoirMemory(50, (1,), seed=0)
    insert(balanced, labels, batch=10)
    insert(reservoir, labels, batch=10)
    assert counts(balanced, 5).tolist() == [10] * 5, counts(balanced, 5)
    assert balanced.seen.numpy().tolist() == sizes
    assert counts(reservoir, 5)[0] > 20 and counts(reservoir, 5)[4] < 4, counts(reservoir, 5)


def test_the_compiled_step_keeps_a_class_balanced_memory():
    """gcl_tf.CBRS fitted on an imbalanced stream (its step compiled, as a run's) stores the rare
    classes that gcl_tf.ER, on the same stream and seed, mostly drops; both learn on it."""
    import keras

    import gcl_tf

    labels = imbalanced_stream([240, 40, 10], seed=1)
    images = (np.eye(3, dtype=np.float32)[labels] + np.random.default_rng(2).normal(0, 0.3, (290, 3)))[:, :, None]
    stored = {}
    for cls in (gcl_tf.CBRS, gcl_tf.ER):
        keras.utils.set_random_seed(0)
        model = cls(linear_backbone((3, 1)), num_classes=3, input_shape=(3, 1), memory_size=15, batch_size=10)
        model.compile(optimizer=keras.optimizers.SGD(0.1))
        model.fit(images, labels, batch_size=10, shuffle=False, verbose=0)
        stored[cls.__name__] = counts(model.memory, 3).tolist()
        assert model.evaluate(images, labels, verbose=0, return_dict=True)["accuracy"] > 0.8, cls.__name__
    assert stored["CBRS"] == [5, 5, 5], stored
    assert stored["ER"][0] >= 10, stored


@pytest.mark.slow  # two runs of the quickstart (5 tasks)
def test_learns_the_quickstart_digits_stream_with_its_preset(tmp_path):
    """The quickstart's permuted digits (5 tasks, balanced classes), CBRS with its preset (ER's
    memory and learning rate): well above Finetune, which forgets (48.7 with seed 0), and deterministic."""
    config, results = quickstart_twice("cbrs", tmp_path)
    assert config.method.memory_size == 200 and config.train.learning_rate == 0.1
    assert results["acc"] > 65.0, results["accuracy_matrix"]  # chance: 10
