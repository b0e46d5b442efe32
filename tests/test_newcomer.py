"""What a new user met (issue 71): sizes, dataset names and messages checked before the work,
each a one-line refusal naming the key and what is allowed, before TensorFlow loads (the
commands run with TensorFlow made unimportable), leaving no folder behind."""
from __future__ import annotations

import os

import numpy as np
import pytest
from test_overwrite import refused, without_tensorflow

from conftest import REPO

QUICKSTART = os.path.join(REPO, "configs", "quickstart.yaml")


def train(tmp_path, *sets: str):
    args = ["gcl_tf.train", "--config", QUICKSTART, "--output", str(tmp_path / "run")]
    for s in sets:
        args += ["--set", s]
    return without_tensorflow(*args)


# ----------------------------------------------------------------------------- sizes (item 2)
def test_a_num_tasks_beyond_the_ram_is_one_line_before_the_data_is_built(tmp_path):
    line = refused(train(tmp_path, "benchmark.num_tasks=100000"),
                   "error: benchmark.num_tasks: 100000 needs about ", "their accuracy matrices", "allowed: at most ")
    assert " tasks here" in line
    assert not (tmp_path / "run").exists()


def test_a_num_tasks_beyond_the_ram_of_an_npz_is_refused_before_its_tasks_are_built(tmp_path):
    x, y = np.zeros((200, 8, 8), np.uint8), np.arange(200) % 10
    np.savez(tmp_path / "d.npz", x_train=x, y_train=y, x_test=x[:50], y_test=y[:50])
    refused(train(tmp_path, "benchmark.source=npz", f"benchmark.path={tmp_path / 'd.npz'}",
                  "benchmark.samples_per_task=null", "benchmark.num_tasks=100000"),
            "error: benchmark.num_tasks: 100000 needs about ")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("setting, expected", [
    ("eval.batch_size=1000000000", "error: eval.batch_size: 1000000000 needs about "),
    ("model.hidden_size=1000000000", "error: model.hidden_size: 1000000000 needs about "),
])
def test_other_sizes_beyond_the_ram_are_one_line(setting, expected, tmp_path):
    refused(train(tmp_path, setting), expected)


def test_the_size_check_names_the_largest_part_and_what_fits():
    from gcl_tf.config import resolve
    from gcl_tf.data.known import DIGITS, check_sizes
    from gcl_tf.errors import ConfigError

    config = resolve({"benchmark": {"name": "permuted", "source": "digits", "dataset": "digits", "num_tasks": 100}})
    args = (config.benchmark, DIGITS.shape, DIGITS.train, DIGITS.test, 10, 100, config.model)
    check_sizes(*args, available=2**30)
    with pytest.raises(ConfigError, match=r"benchmark.num_tasks: 100 needs .* allowed: at most \d+ tasks here"):
        check_sizes(*args, available=2**20 * 6)


def test_split_tasks_beyond_a_tfds_datasets_classes_are_refused_before_tensorflow(tmp_path):
    refused(train(tmp_path, "benchmark.source=tfds", "benchmark.dataset=cifar10", "benchmark.name=split",
                  "benchmark.num_tasks=6"),
            "error: benchmark.num_tasks: 6 tasks x 2 classes", "cifar10 has 10; allowed: num_tasks at most 5")


# ----------------------------------------------------------------------------- TFDS names (item 3)
@pytest.mark.parametrize("name, expected", [
    ("cifar-10", "did you mean 'cifar10'?"),
    ("svhn", "did you mean 'svhn_cropped'?"),
    ("CIFAR100", "did you mean 'cifar100'?"),
    ("imagenet2012", "not TFDS datasets here: convert your copy with python -m gcl_tf.data to-npz"),
])
def test_a_tfds_name_the_library_does_not_support_is_one_line_before_tensorflow(name, expected, tmp_path):
    line = refused(train(tmp_path, "benchmark.source=tfds", f"benchmark.dataset={name}"),
                   f"error: benchmark.dataset: '{name}' is not a TFDS dataset gcl_tf supports; ", expected,
                   "allowed: mnist, fashion_mnist, cifar10, cifar100, svhn_cropped")
    assert "did you mean" not in line or line.count("did you mean") == 1


def test_data_load_of_an_unknown_name_fails_at_once():
    import gcl_tf.data
    from gcl_tf.errors import DataError

    with pytest.raises(DataError, match="'nonexistent_dataset' is not a TFDS dataset gcl_tf supports; allowed: mnist"):
        gcl_tf.data.load("nonexistent_dataset")
    with pytest.raises(DataError, match="did you mean 'svhn_cropped'"):
        gcl_tf.data.load("svhn")


# ----------------------------------------------------------------------------- messages (item 4)
@pytest.mark.parametrize("settings, expected", [
    (["benchmark.num_classes=5"], "labels 0..9 fall outside the class range 0..4 that benchmark.num_classes 5 sets; "
                                  "allowed: benchmark.num_classes 10 or more, or null"),
    (["method.graph_lambda=10"], "error: method.graph_lambda: a key of gcl; the method is er, which has no such key; "
                                 "allowed: er's keys (memory_size, replay_batch_size, test_batchnorm), "
                                 "or method.name=gcl"),
    (["method.name=GCL"], "error: method.name: 'GCL' is not allowed; did you mean 'gcl'?"),
])
def test_messages_name_the_key_and_say_it_right(settings, expected, tmp_path):
    refused(train(tmp_path, *settings), expected)


def test_a_file_that_is_not_an_npz_is_said_so_without_pickle_advice(tmp_path):
    (tmp_path / "text.npz").write_text("hello")
    np.save(tmp_path / "array.npy", np.zeros(3))
    for path in (tmp_path / "text.npz", tmp_path / "array.npy"):
        line = refused(train(tmp_path, "benchmark.source=npz", f"benchmark.path={path}"),
                       f"error: {path}: not a readable .npz file (not a zip archive); allowed: a .npz written by")
        assert "pickle" not in line


def test_a_method_keyword_typo_gets_a_did_you_mean():
    import keras

    import gcl_tf

    backbone = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten()])
    with pytest.raises(TypeError, match="unexpected keyword argument 'graph_lamda'; did you mean 'graph_lambda'"):
        gcl_tf.GCL(backbone=backbone, num_classes=10, graph_lamda=5)


# ----------------------------------------------------------------------------- the ocl preset's command (item 10)
def test_the_ocl_configs_suite_command_plans_the_seeds_its_table_used():
    """configs/split_cifar10_ocl.yaml's header command plans 3 seeds a method, as the README's
    today's-protocol table holds (n=3 at memory 500), not the suite's default 5."""
    import re
    import shlex

    from gcl_tf.benchmark.paper import build_parser

    header = open(os.path.join(REPO, "configs", "split_cifar10_ocl.yaml")).read().split("\nseed:")[0]
    header = header.replace("\\\n#", " ")  # a command continued on the next comment line
    line = next(line for line in header.splitlines() if "gcl_tf.benchmark paper" in line)
    args = build_parser().parse_args(shlex.split(line.split("gcl_tf.benchmark paper", 1)[1]))  # it parses
    table = open(os.path.join(REPO, "docs", "results", "split_cifar10_ocl", "tables", "today.md")).read()
    row = next(r for r in table.splitlines() if "| 500 | ER | resnet18 20 |" in r)
    assert args.seeds == int(re.search(r"\(n=(\d+)\)", row).group(1)) == 3


# ----------------------------------------------------------------------------- silent acceptances (items 5, 6)
@pytest.mark.parametrize("settings, expected", [
    (["method.name=ewc", "benchmark.augment=crop_flip"],
     "error: benchmark.augment: crop_flip is applied inside the training step, which ewc does not augment; "
     "allowed: none or flip with ewc (in-step augmentation is for finetune, er, derpp, er_ace, mir, cbrs, onpro, gcl)"),
    (["benchmark.augment=ocl"], "error: benchmark.augment: ocl jitters colours and turns images gray, but the digits "
                                "images are 8x8 with 1 channel(s); allowed: none, flip or crop_flip"),
    (["method.replay_batch_size=500"], "error: method.replay_batch_size: 500 is more than the method.memory_size 200 "
                                       "samples a memory holds; allowed: at most 200, or null"),
    (["method.name=icarl", "method.memory_size=200", "method.replay_batch_size=500"],
     "error: method.replay_batch_size: 500 is more than the method.memory_size 200 samples a memory holds"),
    (["method.name=mer", "method.memory_size=200", "method.replay_batch_size=500", "train.optimizer=sgd"],
     "error: method.replay_batch_size: 500 is more than the method.memory_size 200 samples a memory holds; "
     "allowed: at most 200"),
])
def test_what_was_accepted_silently_or_after_tensorflow_is_one_line_before_it(settings, expected, tmp_path):
    refused(train(tmp_path, *settings), expected)
    assert not (tmp_path / "run").exists()


def test_an_in_step_augmentation_is_for_the_methods_whose_step_applies_it():
    """What a method's Config says (augments_in_step) is what its step does: the replay family
    (CBRS too, ER's step), Finetune, OnPro and GCL augment inside their step; a model of another refuses one."""
    import gcl_tf
    from gcl_tf import methods
    from gcl_tf.errors import ConfigError

    assert methods.augmenting_names() == ["finetune", "er", "derpp", "er_ace", "mir", "cbrs", "onpro", "gcl"]
    with pytest.raises(ConfigError, match="ewc does not augment inside its step"):
        gcl_tf.EWC(num_classes=10, num_tasks=2, input_shape=(8, 8, 1), augment="ocl")
    assert gcl_tf.ER(num_classes=10, input_shape=(8, 8, 3), augment="ocl").augment == "ocl"


# ----------------------------------------------------------------------------- the Python API's shapes (item 8)
def test_a_model_and_a_stream_of_other_shapes_are_one_clear_error():
    import keras

    import gcl_tf
    from gcl_tf.errors import ConfigError

    stream = gcl_tf.benchmarks.permuted(gcl_tf.data.load("digits"), num_tasks=1, samples_per_task=50)
    small = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(8)])
    with pytest.raises(ConfigError, match=r"input_shape: \(28, 28, 1\) differs from the input \(8, 8, 1\)"):
        gcl_tf.ER(backbone=small, num_classes=10, memory_size=20, input_shape=(28, 28, 1))
    large = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Flatten(), keras.layers.Dense(8)])
    model = gcl_tf.ER(backbone=large, num_classes=10, memory_size=20)
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    with pytest.raises(ConfigError, match="the stream's images are 8x8x1 but er takes 28x28x1"):
        model.fit(stream.tasks[0].train, verbose=0)
