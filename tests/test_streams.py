"""tf.data streams: fixed-shape shuffled training batches; padded evaluation with weight 0."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gcl_tf.data.sources import SplitData
from gcl_tf.data.streams import eval_arrays, eval_dataset, to_float, train_dataset
from gcl_tf.errors import ConfigError
from gcl_tf.methods.base import ContinualModel


def indexed_split(n: int) -> SplitData:
    """Image k is filled with the value k (so a batch tells which samples it holds)."""
    images = np.broadcast_to(np.arange(n, dtype=np.uint8)[:, None, None, None], (n, 3, 2, 1)).copy()
    return SplitData(images, (np.arange(n) % 7).astype(np.int64))


def batches_of(ds):
    """[(sample indices, labels)] for every batch."""
    return [(np.round(to_float(x).numpy()[:, 0, 0, 0] * 255).astype(int), y.numpy()) for x, y in ds]


def test_training_batches_have_static_shape_uint8_and_float_in_unit_range_for_the_model():
    data = indexed_split(53)
    ds, steps = train_dataset(data, batch_size=10, epochs=3, seed=0, task_index=0)
    assert steps == 5
    x_spec, y_spec = ds.element_spec
    assert x_spec.shape.as_list() == [10, 3, 2, 1] and x_spec.dtype == tf.uint8
    assert y_spec.shape.as_list() == [10] and y_spec.dtype == tf.int32
    batches = list(ds)
    assert len(batches) == 3 * 5  # the partial batch of every epoch is dropped
    for x, y in batches:
        assert x.shape == (10, 3, 2, 1) and x.dtype == tf.uint8
        model_input = to_float(x)  # what the compiled step trains on
        assert model_input.dtype == tf.float32
        assert float(tf.reduce_min(model_input)) >= 0.0 and float(tf.reduce_max(model_input)) <= 1.0
        np.testing.assert_allclose(model_input.numpy() * 255.0, x.numpy(), atol=1e-4)
    index, labels = batches_of(ds)[0]
    np.testing.assert_array_equal(labels, data.labels[index])
    assert batches_of(ds)[-1][0].max() <= 52


def test_fewer_samples_than_a_batch_is_a_config_error():
    with pytest.raises(ConfigError, match="train.batch_size: 10 .* 9 training samples"):
        train_dataset(indexed_split(9), batch_size=10, epochs=1, seed=0, task_index=0)


def test_training_order_fixed_for_a_seed_and_reshuffled_every_epoch():
    data = indexed_split(50)

    def order(seed, task=0):
        ds, _ = train_dataset(data, batch_size=10, epochs=3, seed=seed, task_index=task)
        return np.concatenate([index for index, _ in batches_of(ds)]).reshape(3, 50)

    a = order(0)
    np.testing.assert_array_equal(a, order(0))
    for epoch in a:  # every epoch is one pass over all samples
        assert sorted(epoch) == list(range(50))
    assert not np.array_equal(a[0], a[1]) and not np.array_equal(a[1], a[2])
    assert not np.array_equal(a[0], np.arange(50))  # shuffled
    assert not np.array_equal(a, order(1))
    assert not np.array_equal(a, order(0, task=1))
    # Resuming part-way gives the rest of the same stream.
    ds, _ = train_dataset(data, batch_size=10, epochs=3, seed=0, task_index=0)
    ds = ds.skip(7)  # as the task loop resumes
    np.testing.assert_array_equal(np.concatenate([i for i, _ in batches_of(ds)]), a.reshape(-1)[70:])


def test_eval_arrays_pad_to_whole_batches_with_weight_zero():
    data = indexed_split(23)
    mask = np.array([True, False, True, True, True, True, True])
    images, labels, masks, weights = eval_arrays(data, mask, batch_size=10)
    assert len(images) == len(labels) == len(masks) == len(weights) == 30
    np.testing.assert_array_equal(weights, [1.0] * 23 + [0.0] * 7)
    np.testing.assert_array_equal(images[:23], data.images)
    assert (masks == mask).all()
    ds = eval_dataset(data, mask, batch_size=10)
    shapes = [tuple(x.shape) for x, _, _, _ in ds]
    assert shapes == [(10, 3, 2, 1)] * 3
    assert float(sum(tf.reduce_sum(w) for _, _, _, w in ds)) == 23.0
    x, _, m, _ = next(iter(ds))
    assert x.dtype == tf.uint8 and m.shape == (10, 7)


class Bright(ContinualModel):
    """Predicts class 1 for images brighter than 0.5, class 0 otherwise (classes 2.. never)."""

    def call(self, x, training=False):
        mean = tf.reduce_mean(tf.reshape(x, [tf.shape(x)[0], -1]), axis=1)  # [N]
        logits = tf.stack([0.5 - mean, mean - 0.5], axis=1)  # [N, 2]
        return tf.pad(logits, [[0, 0], [0, self.num_classes - 2]], constant_values=-5.0)


class Fixed(ContinualModel):
    """The same logits for every image: class 0 best, then 1, then 2 ..."""

    def call(self, x, training=False):
        logits = -tf.range(self.num_classes, dtype=tf.float32)
        return tf.tile(logits[None], [tf.shape(x)[0], 1])


def evaluate(model, data, mask, batch_size):
    model.compile()
    return model.evaluate(eval_dataset(data, mask, batch_size), verbose=0, return_dict=True)["accuracy"]


def test_evaluation_accuracy_ignores_padding(make_config):
    model = Bright(num_classes=3, input_shape=(3, 2, 1))
    # 7 white images of class 0: all wrong. The 3 padding images are black with label 0: they
    # would be "right" if they counted.
    white = SplitData(np.full((7, 3, 2, 1), 255, np.uint8), np.zeros(7, np.int64))
    assert evaluate(model, white, np.ones(3, bool), batch_size=5) == 0.0
    # 4 of 7 right.
    mixed = SplitData(np.full((7, 3, 2, 1), 255, np.uint8), np.array([1, 1, 0, 1, 0, 1, 0]))
    np.testing.assert_allclose(evaluate(model, mixed, np.ones(3, bool), batch_size=5), 4 / 7, rtol=1e-6)
    np.testing.assert_allclose(evaluate(model, mixed, np.ones(3, bool), batch_size=100), 4 / 7, rtol=1e-6)


def test_evaluation_class_mask_restricts_predictions(make_config):
    model = Fixed(num_classes=4, input_shape=(3, 2, 1))
    data = SplitData(np.zeros((6, 3, 2, 1), np.uint8), np.full(6, 2, np.int64))
    assert evaluate(model, data, np.ones(4, bool), batch_size=4) == 0.0  # predicts 0
    # Multi-head: only classes 2 and 3 allowed -> predicts 2.
    assert evaluate(model, data, np.array([False, False, True, True]), batch_size=4) == 1.0


def left_right_images(n: int) -> SplitData:
    """Image k: row values [k, 0, 0, 0] (value k at the left edge) so a flip is visible."""
    images = np.zeros((n, 2, 4, 3), np.uint8)
    images[:, :, 0, :] = np.arange(1, n + 1, dtype=np.uint8)[:, None, None]
    return SplitData(images, (np.arange(n) % 5).astype(np.int64))


def test_flip_augmentation_mirrors_about_half_the_stream_deterministically_and_resumes_exactly():
    data = left_right_images(200)

    def stream(skip=0, seed=0, augment="flip"):
        ds, _ = train_dataset(data, batch_size=10, epochs=2, seed=seed, task_index=0, augment=augment)
        ds = ds.skip(skip)  # as the task loop resumes
        return np.concatenate([x.numpy() for x, _ in ds])

    plain, flipped = stream(augment="none"), stream()
    left = plain[:, :, 0, :].max(axis=(1, 2))  # the sample's id, at the left edge before the flip
    mirrored = flipped[:, :, 3, :].max(axis=(1, 2)) > 0  # the id moved to the right edge
    assert 0.4 < mirrored.mean() < 0.6  # each sample mirrored with probability 1/2
    np.testing.assert_array_equal(flipped[mirrored], plain[mirrored][:, :, ::-1])
    np.testing.assert_array_equal(flipped[~mirrored], plain[~mirrored])
    np.testing.assert_array_equal(left, np.where(mirrored, flipped[:, :, 3, :].max(axis=(1, 2)),
                                                 flipped[:, :, 0, :].max(axis=(1, 2))))
    first, second = mirrored[:200], mirrored[200:]  # every epoch draws anew
    assert not np.array_equal(first[np.argsort(left[:200])], second[np.argsort(left[200:])])
    np.testing.assert_array_equal(stream(), flipped)  # the same for the seed
    assert not np.array_equal(stream(seed=1)[:, :, 3], np.zeros_like(flipped[:, :, 3])) and \
        not np.array_equal(stream(seed=1), flipped)
    np.testing.assert_array_equal(stream(skip=7), flipped[70:])  # resuming continues the same flips


@pytest.mark.slow
@pytest.mark.parametrize("method", ["gcl", "er"])
def test_a_run_with_flip_augmentation_stores_mirrored_images_in_memory(tmp_path, method):
    """benchmark.augment: flip reaches the training stream of a run: the memory (which stores what
    the model trained on: GCL's contexts, as the authors' loaders flip before the model, and ER's)
    holds training images of which some are mirrored, all as in the data."""
    from gcl_tf import train

    from helpers import digits_config

    config = digits_config({"name": method, "memory_size": 100},
                           benchmark={"name": "split", "num_tasks": 2, "classes_per_task": 2,
                                      "samples_per_task": None, "augment": "flip"})
    if method == "gcl":  # GCL's optimizer (SGD at 0.1 diverges)
        from gcl_tf import config as config_lib

        config = config_lib.resolve(config.to_dict(), ["train.optimizer=adam", "train.learning_rate=0.001"])
    from gcl_tf.data import ContinualBenchmark

    benchmark = ContinualBenchmark(config.benchmark, config.seed)
    model = train.train_model(config, str(tmp_path / "run"), verbose=0, benchmark=benchmark).model  # the run's learner
    assert type(model).__name__ == method.upper()
    memory = np.round(model.memory.images.numpy() * 255).astype(np.uint8)  # [100, 8, 8, 1]
    originals = {img.tobytes() for task in benchmark.tasks for img in task.train_data.images}
    mirrors = {img[:, ::-1].tobytes() for task in benchmark.tasks for img in task.train_data.images}
    as_is = np.array([img.tobytes() in originals for img in memory])
    mirrored = np.array([img.tobytes() in mirrors for img in memory])
    assert np.all(as_is | mirrored)
    assert 0.25 < np.mean(mirrored & ~as_is) < 0.75
