"""Test-time BatchNorm statistics from the memory (gcl_tf/batchnorm.py; GCL's method.test_batchnorm,
rule 27 of docs/gcl/todays_rules.md): within the span each BatchNorm layer normalises by its inputs'
statistics over the given images, and the moving ones come back after."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gcl_tf.batchnorm import batchnorm_layers, statistics_of


def trained_trunk():
    """A trunk with two BatchNorm layers whose moving statistics are far from any one batch's."""
    import keras

    keras.utils.set_random_seed(0)
    trunk = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
                              keras.layers.ReLU(), keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
                              keras.layers.ReLU(), keras.layers.Flatten()])
    for scale in (1.0, 3.0, 0.2):  # statistics of other images
        trunk(tf.random.normal([16, 8, 8, 3], seed=1) * scale + 2.0, training=True)
    return trunk


def test_within_the_span_the_trunk_normalises_the_images_by_their_own_statistics():
    trunk = trained_trunk()
    images = tf.random.uniform([40, 8, 8, 3], seed=2)
    moving = [(b.moving_mean.numpy(), b.moving_variance.numpy(), b.momentum) for b in batchnorm_layers(trunk)]
    as_a_batch = trunk(images, training=True).numpy()  # each layer: the batch's own statistics
    for b, (mean, variance, _) in zip(batchnorm_layers(trunk), moving):  # (that pass moved them a little: back)
        b.moving_mean.assign(mean)
        b.moving_variance.assign(variance)
    before = trunk(images, training=False).numpy()
    with statistics_of(trunk, images) as layers:
        within = trunk(images, training=False).numpy()
    assert layers == 2
    np.testing.assert_allclose(within, as_a_batch, rtol=1e-4, atol=1e-4)
    assert np.abs(before - within).max() > 0.1  # the moving statistics are another normalisation
    for b, (mean, variance, momentum) in zip(batchnorm_layers(trunk), moving):
        np.testing.assert_array_equal(b.moving_mean.numpy(), mean)  # given back as they were
        np.testing.assert_array_equal(b.moving_variance.numpy(), variance)
        assert b.momentum == momentum
    np.testing.assert_array_equal(trunk(images, training=False).numpy(), before)


def test_no_image_or_no_batchnorm_changes_nothing():
    import keras

    trunk = trained_trunk()
    images = tf.random.uniform([5, 8, 8, 3], seed=2)
    before = trunk(images, training=False).numpy()
    with statistics_of(trunk, images[:0]) as layers:
        np.testing.assert_array_equal(trunk(images, training=False).numpy(), before)
    assert layers == 0
    plain = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(3)])
    with statistics_of(plain, images) as layers:
        assert layers == 0


def test_gcl_evaluates_with_the_memorys_statistics_when_asked_and_trains_on_unchanged():
    """GCL with method.test_batchnorm: memory: its predictions are those of its trunk with the memory's statistics
    (set by hand here), they differ from the moving statistics', and after each evaluation the moving statistics
    are as before, so training goes on from them."""
    import keras

    import gcl_tf

    keras.utils.set_random_seed(0)
    trunk = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
                              keras.layers.ReLU(), keras.layers.Flatten()])
    model = gcl_tf.GCL(backbone=trunk, num_classes=4, memory_size=30, hidden_size=16, test_batchnorm="memory")
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    rng = np.random.default_rng(0)
    x, y = (rng.random((60, 8, 8, 3), dtype=np.float32) * 3 + 1), np.arange(60) % 4  # the training images' scale
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(10), verbose=0)
    test = rng.random((20, 8, 8, 3), dtype=np.float32)  # another scale: the moving statistics do not fit it
    layer = batchnorm_layers(model.trunk)[0]
    moving = layer.moving_mean.numpy(), layer.moving_variance.numpy()
    got = model.predict(test, verbose=0)
    np.testing.assert_array_equal(layer.moving_mean.numpy(), moving[0])
    np.testing.assert_array_equal(layer.moving_variance.numpy(), moving[1])
    with model.evaluation_variant({"test_batchnorm": "moving"}):
        plain = model.predict(test, verbose=0)
        with statistics_of(model.trunk, model.memory.images[:30]):  # the memory's statistics, by hand
            by_hand = model.predict(test, verbose=0)
    np.testing.assert_allclose(got, by_hand, rtol=1e-4, atol=1e-5)
    assert np.abs(got - plain).max() > 1e-3
    history = model.fit(tf.data.Dataset.from_tensor_slices((x[:20], y[:20])).batch(10), verbose=0)
    assert np.isfinite(history.history["loss"][-1])


@pytest.mark.parametrize("method", ["ER", "ERACE", "DERPP", "MIR"])
def test_the_replay_methods_evaluate_with_the_memorys_statistics_when_asked(method):
    """ER and the methods derived from it take the same key: their predictions with it are those of their
    network with the memory's statistics (set by hand), and the moving statistics come back after."""
    import keras

    import gcl_tf

    keras.utils.set_random_seed(0)
    trunk = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
                              keras.layers.ReLU(), keras.layers.Flatten()])
    model = getattr(gcl_tf, method)(trunk, num_classes=4, memory_size=30, replay_batch_size=10,
                                    test_batchnorm="memory")
    model.compile(optimizer=keras.optimizers.SGD(0.05))
    rng = np.random.default_rng(0)
    x, y = (rng.random((60, 8, 8, 3), dtype=np.float32) * 3 + 1), np.arange(60) % 4
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(10), verbose=0)
    test = rng.random((20, 8, 8, 3), dtype=np.float32)
    layer = batchnorm_layers(model.network)[0]
    moving = layer.moving_mean.numpy()
    got = model.predict(test, verbose=0)
    np.testing.assert_array_equal(layer.moving_mean.numpy(), moving)
    with model.evaluation_variant({"test_batchnorm": "moving"}):
        plain = model.predict(test, verbose=0)
        with statistics_of(model.network, model.memory.images[:30]):
            by_hand = model.predict(test, verbose=0)
    np.testing.assert_allclose(got, by_hand, rtol=1e-4, atol=1e-5)
    assert np.abs(got - plain).max() > 1e-3


def test_test_batchnorm_takes_moving_or_memory_in_one_line():
    from gcl_harness import make_config

    from gcl_tf.errors import ConfigError

    assert make_config(test_batchnorm="memory").method.test_batchnorm == "memory"
    with pytest.raises(ConfigError, match=r"method.test_batchnorm.*moving, memory"):
        make_config(test_batchnorm="batch")
    from helpers import digits_config

    assert digits_config({"name": "er_ace", "test_batchnorm": "memory"}).method.test_batchnorm == "memory"


def test_an_export_serves_the_statistics_the_run_evaluated_with(tmp_path):
    """gcl_tf.export saves inside the method's test_statistics: the SavedModel of a GCL with
    test_batchnorm: memory serves what its evaluation predicts, not the moving statistics'."""
    from gcl_tf import export
    from gcl_tf.train import run

    from helpers import digits_config

    config = digits_config({"name": "gcl", "memory_size": 30, "test_batchnorm": "memory", "test_graph_samples": 1},
                           {"num_tasks": 2, "samples_per_task": 60}, backbone="resnet18", filters=4,
                           hidden_size=16)
    run(config, output_dir=str(tmp_path / "run"), verbose=0)
    model, _, _ = export.load_run(str(tmp_path / "run"))
    images = np.random.default_rng(0).random((12, *model.image_shape), dtype=np.float32)
    seed = tf.constant(0, tf.int64)
    evaluated = export.class_probabilities(model, images, seed)
    with model.evaluation_scope():
        evaluated_in_scope = export.class_probabilities(model, images, seed).numpy()
    assert np.abs(evaluated_in_scope - evaluated.numpy()).max() > 1e-4  # the statistics matter here
    export.export(str(tmp_path / "run"), str(tmp_path / "exported"))
    serve = tf.saved_model.load(str(tmp_path / "exported")).signatures[export.SIGNATURE]
    served = serve(images=tf.constant(images), seed=seed)["probabilities"].numpy()
    np.testing.assert_allclose(served, evaluated_in_scope, atol=1e-5)


MIRRORED = """
import json
import keras
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from gcl_tf.batchnorm import batchnorm_layers, statistics_of
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    keras.utils.set_random_seed(0)
    trunk = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
                              keras.layers.ReLU(), keras.layers.Flatten()])
    layer = batchnorm_layers(trunk)[0]
    layer.moving_mean.assign(tf.fill([4], 3.0))  # far from the images' own
    images = tf.random.uniform([40, 8, 8, 3], seed=2)
    before = trunk(images, training=False).numpy()
    with statistics_of(trunk, images):
        within = trunk(images, training=False).numpy()
        copies = [v.numpy().tolist() for v in strategy.experimental_local_results(layer.moving_mean.value)]
    after = trunk(images, training=False).numpy()
    restored = [v.numpy().tolist() for v in strategy.experimental_local_results(layer.moving_mean.value)]
features = keras.Sequential(trunk.layers[:1])(images).numpy().reshape(-1, 4)
print("REPORT " + json.dumps({"copies": copies, "restored": restored, "mean": features.mean(0).tolist(),
                              "changed": float(np.abs(before - within).max()),
                              "after": float(np.abs(before - after).max())}))
"""


def test_under_a_mirrored_strategy_every_replicas_statistics_are_set_and_given_back(tmp_path):
    """On two logical CPUs (a fresh process: logical devices are set before TensorFlow starts) the span
    sets each replica's copy of the statistics to the images' and gives every copy back."""
    from conftest import run_script

    report = run_script(tmp_path / "mirrored.py", MIRRORED)
    assert len(report["copies"]) == 2
    for copy in report["copies"]:
        np.testing.assert_allclose(copy, report["mean"], rtol=1e-4, atol=1e-5)
    assert report["restored"] == [[3.0] * 4] * 2
    assert report["changed"] > 0.1 and report["after"] == 0.0
