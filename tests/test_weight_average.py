"""The weights' moving average (train.ema_momentum, Keras's use_ema): the learner learns on from its
own weights across tasks, evaluations and predictions read the averages and give the learned
weights back, a checkpoint carries the averages, and a bad momentum is one line."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
from faults_harness import cli_error
from test_api import digits, user_backbone
from test_rerun_switches import TODAY, one_line_error

import gcl_tf
from gcl_tf.config import TrainConfig, load_config


def averaging_er(momentum=0.9, seed=0):
    import keras

    from gcl_tf.optimizers import make_optimizer

    keras.utils.set_random_seed(seed)
    model = gcl_tf.ER(backbone=user_backbone(), num_classes=10, memory_size=50, replay_batch_size=10, seed=seed)
    model.compile(optimizer=make_optimizer(TrainConfig(optimizer="adam", learning_rate=0.01, ema_momentum=momentum)))
    return model


def fit_task(model, task: int, n: int = 200):
    import tensorflow as tf

    images, labels = digits(task, n)
    model.fit(tf.data.Dataset.from_tensor_slices((images, labels)).batch(10), verbose=0)
    return images, labels


def values(variables):
    return [np.array(v.numpy()) for v in variables]


def test_the_learner_learns_on_from_its_own_weights_and_evaluates_with_the_averages():
    """After a task (a fit) the weights are the learned ones, not Keras's overwrite with the
    averages; inside an evaluation span they are the averages; after it, the learned ones again,
    to the bit; and evaluate/predict answer as a model holding the averages does."""
    import tensorflow as tf

    model = averaging_er()
    images, labels = fit_task(model, 0)
    averages = values(model.optimizer._model_variables_moving_average)
    learned = values(model.trainable_variables)
    # averages of a moving model differ from its last weights (momentum 0.9 over 20 steps)
    assert max(np.abs(a - w).max() for a, w in zip(averages, learned)) > 1e-4
    with model.evaluation_scope():
        for inside, average in zip(values(model.trainable_variables), averages):
            np.testing.assert_array_equal(inside, average)
        by_average = model.predict(images, verbose=0)
    for after, weight in zip(values(model.trainable_variables), learned):
        np.testing.assert_array_equal(after, weight)
    np.testing.assert_array_equal(model.predict(images, verbose=0), by_average)  # predict reads the averages
    by_learned = model.predict_on_batch(images)  # outside any span: the learned weights
    nll = {name: float(-np.mean(np.log(p[np.arange(len(labels)), labels]))) for name, p in
           (("average", by_average), ("learned", by_learned))}
    assert abs(nll["average"] - nll["learned"]) > 1e-3  # the two models answer apart
    logs = model.evaluate(tf.data.Dataset.from_tensor_slices((images, labels)).batch(50), verbose=0, return_dict=True)
    assert logs["loss"] == pytest.approx(nll["average"], rel=1e-4)  # evaluate reads the averages
    assert logs["accuracy"] == pytest.approx(float(np.mean(np.argmax(by_average, axis=1) == labels)), abs=1e-6)
    for after, weight in zip(values(model.trainable_variables), learned):
        np.testing.assert_array_equal(after, weight)


def test_an_evaluation_that_fails_gives_the_learned_weights_back():
    model = averaging_er()
    fit_task(model, 0, n=60)
    learned = values(model.trainable_variables)

    def failing():
        raise RuntimeError("a hook failed")

    model.on_evaluation_begin = failing
    with pytest.raises(RuntimeError):
        with model.evaluation_scope():
            pass
    for after, weight in zip(values(model.trainable_variables), learned):
        np.testing.assert_array_equal(after, weight)
    del model.on_evaluation_begin
    with model.evaluation_scope():  # the next span swaps and calls its hooks again
        assert not all(np.array_equal(a, w) for a, w in zip(values(model.trainable_variables), learned))


def test_mer_which_writes_its_weights_itself_refuses_an_average(capsys):
    import keras

    from gcl_tf import train

    line = cli_error(train.main, ["--config", TODAY, "--set", "method.name=mer", "--set", "train.optimizer=sgd",
                                  "--set", "train.ema_momentum=0.99"], capsys)
    assert line == "error: train.ema_momentum: mer writes its weights itself (MER Algorithm 1), past the optimizer " \
                   "that would average them; allowed: null"
    model = gcl_tf.MER(backbone=user_backbone(), num_classes=10, memory_size=20)
    with pytest.raises(Exception, match="train.ema_momentum: mer writes its weights itself"):
        model.compile(optimizer=keras.optimizers.SGD(0.1, use_ema=True))


def test_a_learner_continued_with_another_average_is_refused():
    """The averages are optimizer state: a learner saved with one train.ema_momentum is not a
    learner of a config with another (init_from compares it, as it compares train.optimizer)."""
    from gcl_tf.learner import learner_keys

    from helpers import digits_config

    info = {"input_shape": (8, 8, 1), "num_classes": 10}
    plain, averaged = digits_config({"name": "er"}), digits_config({"name": "er"})
    averaged.train.ema_momentum = 0.99
    differing = {k for k, v in learner_keys(averaged, info).items() if learner_keys(plain, info)[k] != v}
    assert differing == {"train.ema_momentum"}


def test_the_averages_follow_the_momentum():
    """avg = m avg + (1 - m) w after every step (the first step's average is its weights)."""
    import tensorflow as tf

    model = averaging_er(momentum=0.5)
    images, labels = digits(0, 30)
    batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(10)
    model.fit(batches.take(1), verbose=0)  # one step: the memory was empty, nothing learned, the weights copied
    expected = values(model.trainable_variables)
    for batch in batches.skip(1):
        model.fit(tf.data.Dataset.from_tensors(batch), verbose=0)
        expected = [0.5 * a + 0.5 * w for a, w in zip(expected, values(model.trainable_variables))]
    for average, want in zip(values(model.optimizer._model_variables_moving_average), expected):
        np.testing.assert_allclose(average, want, rtol=1e-5, atol=1e-6)


def test_a_checkpoint_carries_the_averages(tmp_path):
    import tensorflow as tf

    model = averaging_er()
    fit_task(model, 0, n=60)
    saved = values(model.optimizer._model_variables_moving_average)
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(str(tmp_path / "ckpt"))
    fresh = averaging_er(seed=1)
    assert max(np.abs(a - b).max() for a, b in zip(values(fresh.optimizer._model_variables_moving_average),
                                                   saved)) > 1e-4
    tf.train.Checkpoint(model=fresh, optimizer=fresh.optimizer).read(path).assert_existing_objects_matched()
    for restored, want in zip(values(fresh.optimizer._model_variables_moving_average), saved):
        np.testing.assert_array_equal(restored, want)


def test_the_momentum_is_validated_in_one_line(capsys):
    from gcl_tf import train

    assert load_config(TODAY, ["method.name=er", "train.ema_momentum=0.99"]).train.ema_momentum == 0.99
    assert load_config(TODAY, ["method.name=er"]).train.ema_momentum is None
    assert "allowed: (0, 1)" in one_line_error(["method.name=er", "train.ema_momentum=1"])
    line = cli_error(train.main, ["--config", TODAY, "--set", "train.ema_momentum=1.5"], capsys)
    assert line.startswith("error: train.ema_momentum: ") and line.endswith("allowed: (0, 1)")


def test_an_averaged_run_exports_its_averages(tmp_path):
    """A run with train.ema_momentum: the checkpoint it leaves restores its averages
    (export.load_run), and the SavedModel serves them, what the run evaluated, not the learned
    weights."""
    import tensorflow as tf

    from gcl_tf import export
    from gcl_tf.train import run

    from helpers import digits_config

    config = digits_config({"name": "er", "memory_size": 50})
    config.train.ema_momentum = 0.9
    result = run(config, output_dir=str(tmp_path / "run"), verbose=0)
    model, _, _ = export.load_run(str(tmp_path / "run"))
    images = digits(0, 40)[0].astype(np.float32) / 255.0
    learned = model.predict_on_batch(images)  # outside an evaluation: the learned weights
    averaged = model.predict(images, verbose=0)
    assert np.abs(learned - averaged).max() > 1e-3
    export.export(str(tmp_path / "run"), str(tmp_path / "exported"))
    serve = tf.saved_model.load(str(tmp_path / "exported")).signatures[export.SIGNATURE]
    served = serve(images=tf.constant(images), seed=tf.constant(0, tf.int64))["probabilities"].numpy()
    np.testing.assert_allclose(served, averaged, atol=1e-5)
    assert result["accuracy_matrix"][-1][-1] > 20  # it learned: the averages are of a moving model


def test_icarl_s_class_means_are_of_the_weights_its_predictions_read():
    """iCaRL predicts by the nearest class mean: with train.ema_momentum the means are taken by
    the averages, the weights its predictions read, not by the learned ones."""
    import keras

    from gcl_tf.optimizers import averages_in_place

    keras.utils.set_random_seed(0)
    model = gcl_tf.ICaRL(backbone=user_backbone(), num_classes=10, memory_size=50, num_tasks=2)
    model.compile(optimizer=keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.9))
    fit_task(model, 0)
    ex = model.exemplars
    count = int(np.sum(ex.set_id.numpy() >= 0))
    images, labels = ex.images.numpy()[:count], ex.labels.numpy()[:count]
    means = {}
    for name, weights in (("average", averages_in_place(model.optimizer)), ("learned", averages_in_place(None))):
        with weights:
            feats = model.features(images)
        means[name] = np.stack([feats[labels == c].mean(0) / np.linalg.norm(feats[labels == c].mean(0))
                                for c in np.unique(labels)])
    stored = ex.class_means.numpy()[np.unique(labels)]
    np.testing.assert_allclose(stored, means["average"], atol=1e-5)
    assert np.abs(stored - means["learned"]).max() > 1e-3
