"""GCL under today's protocol on the baselines' ResNet-18 (docs/gcl_today.md, issue 69): the
today's preset learns a first task the paper's GCL does not.

On the ResNet-18 with colour jitter the paper's GCL stays at chance: its graph regulariser holds
most contexts to edges stored before anything was learned, which weigh the memory alike, so the
graph carries no label (Split CIFAR10's first task: 48.3 on validation, ER 79.3). The same happens on
a small colour stream built here, scikit-learn's digits 0 and 1 drawn in colour at 16x16 (no
download), in seconds.
"""
import os

import numpy as np
import pytest
import yaml

import gcl_tf

from helpers import REPO

#: The paper's GCL, as the today's preset was before issue 69 (every library switch off).
PAPER = {"graph_lambda": 50, "context_temperature": 1.0, "target_temperature": 5, "regularize_below": None,
         "kernel": "rbf", "kernel_width": None, "own_latent": False, "target_loss": "all",
         "edge_memory": "matrix", "context_batch": None, "test_batchnorm": "moving"}


def colour_digits(path, size: int = 16) -> str:
    """Digits as yellow strokes on blue at ``size`` x ``size`` x 3 (uint8), 80% train, 20% test."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    strokes = np.kron(digits.images / 16.0, np.ones((size // 8, size // 8)))[..., None]  # [N, size, size, 1]
    images = 255 * (strokes * np.array([1.0, 0.8, 0.2]) + (1 - strokes) * np.array([0.1, 0.2, 0.5]))
    order = np.random.default_rng(0).permutation(len(images))
    cut = int(0.8 * len(order))
    np.savez(path, x_train=images[order[:cut]].astype(np.uint8), y_train=digits.target[order[:cut]],
             x_test=images[order[cut:]].astype(np.uint8), y_test=digits.target[order[cut:]])
    return str(path)


def first_task_accuracy(method: dict, tmp_path) -> float:
    """Test ACC (%) on the first task (digits 0 and 1) after 3 passes under ``augment: ocl`` on a
    ResNet-18 of 8 filters, memory 100, Adam 1e-3, batch 10 (87 steps)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = {"seed": 0, "benchmark": {"name": "split", "dataset": "colour_digits", "source": "npz",
                                       "path": colour_digits(tmp_path / "digits.npz"), "num_tasks": 1,
                                       "classes_per_task": 2, "samples_per_task": None, "augment": "ocl"},
              # the toy's memory: its contexts at most half of it
              "method": {**method, "name": "gcl", "memory_size": 100,
                         "context_batch": method.get("context_batch") and min(method["context_batch"], 50)},
              "model": {"backbone": "resnet18", "filters": 8, "hidden_size": 64},
              "train": {"batch_size": 10, "epochs": 3, "optimizer": "adam", "learning_rate": 0.001, "verbose": 0,
                        "checkpoint_every": 0},
              "eval": {"batch_size": 200}}
    return gcl_tf.run(config, output_dir=str(tmp_path / "run")).acc


@pytest.mark.slow
def test_the_todays_preset_learns_the_first_task_where_the_papers_gcl_stays_at_chance(tmp_path):
    with open(os.path.join(REPO, "configs", "split_cifar10_ocl.yaml")) as f:
        preset = yaml.safe_load(f)["presets"]["gcl"]
    assert preset["model"]["backbone"] == "resnet18"  # the baselines' trunk
    todays = first_task_accuracy(preset["method"], tmp_path / "todays")
    paper = first_task_accuracy({**preset["method"], **PAPER}, tmp_path / "paper")
    assert todays >= 85.0 and paper < 70.0, (todays, paper)


def _uniform_gcl(**keys):
    """A small GCL after three batches with its kernel made so wide that every edge is near 1: each
    row weighs the memory alike (the case the warning names)."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), memory_size=20, hidden_size=16, **keys)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    x, y = np.random.default_rng(0).random((30, 8, 8, 1), dtype=np.float32), np.arange(30) % 10
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(10), verbose=0)
    model.kernel_log_scale.assign(np.log(1e6))
    return model, np.random.default_rng(1).random((30, 8, 8, 1), dtype=np.float32), np.arange(30) % 10


def test_the_warning_names_the_regulariser_when_it_holds_the_contexts_and_the_kernel_when_it_does_not():
    """After a task learned at chance with edges that weigh the memory alike, the advice follows
    the cause: a graph regulariser holding the contexts (their loss above their best; the paper's
    GCL on the ResNet-18 under today's protocol) is told to go, else the kernel's start is."""
    model, images, labels = _uniform_gcl()
    model.memory.best_loss.assign(np.zeros(20, np.float32))  # every context got worse than its best
    assert model.held_fraction() == 1.0
    line = model.learning_warning(0, images, labels)
    assert "the graph regulariser holds 100% of the memory's contexts" in line
    assert "try method.graph_lambda: 0" in line and "kernel_start_edge" not in line
    model.memory.best_loss.assign(np.full(20, np.inf, np.float32))  # none has a best yet: none held
    assert model.held_fraction() == 0.0
    line = model.learning_warning(0, images, labels)
    assert "regulariser" not in line and "try a smaller method.kernel_start_edge" in line
    free, images, labels = _uniform_gcl(graph_lambda=0.0)  # no regulariser: the kernel is the cause
    free.memory.best_loss.assign(np.zeros(20, np.float32))
    assert "try a smaller method.kernel_start_edge" in free.learning_warning(0, images, labels)


def test_a_task_told_apart_but_taken_for_old_classes_is_learned_and_not_warned_of():
    """The warning reads a task's images among its own classes: a task the model tells apart but
    answers with an old class (GCL's last task at memory 200 under today's protocol: 91% among its
    two classes, 60% among all; docs/gcl_today.md) was learned, and no kernel setting mends that."""
    import tensorflow as tf

    model, _, _ = _uniform_gcl()  # every edge near 1: the kernel's case, were the task not learned
    x = np.concatenate([np.full((20, 8, 8, 1), 0.1, np.float32), np.full((20, 8, 8, 1), 0.9, np.float32)])
    y = np.repeat([1, 2], 20)
    task = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(40, seed=0).batch(10)
    model.fit(task, epochs=20, verbose=0)  # the own head learns 1 against 2 (within 80 steps)
    model.kernel_log_scale.assign(np.log(1e6))
    bias = model.output_head.bias
    bias.assign(bias + 100.0 * np.eye(10, dtype=np.float32)[0])  # class 0 outweighs every other
    assert model.accuracy_and_test_graph(x, y)[0] == 0.0  # every image taken for the old class 0
    assert model.accuracy_and_test_graphs(x, y, [1, 2])[0] >= 90.0  # told apart among its own
    assert model.learning_warning(1, x, y) is None
    model.own_head.kernel.assign(tf.zeros_like(model.own_head.kernel))  # now it tells nothing apart
    line = model.learning_warning(1, x, y)
    assert line is not None and "right among its 2 classes (chance: 50%)" in line


def test_the_warning_reads_a_task_as_evaluations_do_with_the_memorys_batchnorm_statistics():
    """With ``test_batchnorm: memory`` an evaluation normalises by the memory's statistics, and so does the
    warning's reading of the task just learned: a task told apart under them is not warned of although the
    moving statistics fit no image; read at the moving statistics, it is (and they are given back)."""
    import keras
    import tensorflow as tf

    from gcl_tf.batchnorm import batchnorm_layers

    keras.utils.set_random_seed(0)
    trunk = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(8, 3), keras.layers.BatchNormalization(),
                              keras.layers.ReLU(), keras.layers.Flatten()])
    model = gcl_tf.GCL(backbone=trunk, num_classes=10, memory_size=40, hidden_size=16, test_batchnorm="memory")
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    noise = np.random.default_rng(0).normal(0.0, 0.05, (40, 8, 8, 3)).astype(np.float32)
    x = np.concatenate([np.full((20, 8, 8, 3), 0.2, np.float32), np.full((20, 8, 8, 3), 0.8, np.float32)]) + noise
    y = np.repeat([1, 2], 20)
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).shuffle(40, seed=0).batch(10), epochs=20, verbose=0)
    layers = batchnorm_layers(model.trunk)
    for layer in layers:
        layer.moving_mean.assign(layer.moving_mean + 100.0)  # moving statistics that fit no image
    moving = [layer.moving_mean.numpy() for layer in layers]
    model.kernel_log_scale.assign(np.log(1e6))  # every edge near 1: the kernel's case, were the task not learned
    assert model.accuracy_and_test_graphs(x, y, [1, 2])[0] >= 90.0  # the memory's statistics, as evaluated
    assert model.learning_warning(0, x, y) is None
    with model.evaluation_variant({"test_batchnorm": "moving"}):
        assert model.accuracy_and_test_graphs(x, y, [1, 2])[0] <= 60.0
        line = model.learning_warning(0, x, y)
    assert line is not None and "right among its 2 classes (chance: 50%)" in line
    for layer, mean in zip(layers, moving):
        np.testing.assert_array_equal(layer.moving_mean.numpy(), mean)
