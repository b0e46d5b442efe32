"""Every config's presets learn (gcl_tf.benchmark.presets): the check's pieces, and the check itself
on scikit-learn's digits for every MNIST-like config's GCL preset (the RGB presets are checked on
CIFAR-10 by the benchmark command, docs/reproducing/split_cifar10.md)."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from gcl_tf import config as config_lib
from gcl_tf.benchmark import presets
from gcl_tf.errors import UserError

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs")
CONFIGS = sorted(glob.glob(os.path.join(CONFIG_DIR, "*.yaml")))


def test_learns_needs_each_new_task_far_above_chance():
    stalled = [[60.0, 10.0, 10.0], [55.0, 10.2, 10.0], [50.0, 10.0, 10.1]]  # the cold start: chance after task 1
    ok, score = presets.learns(stalled, 10.0)
    assert not ok and score == pytest.approx(10.15)
    learning = [[80.0, 10.0, 10.0], [70.0, 60.0, 10.0], [65.0, 55.0, 50.0]]
    assert presets.learns(learning, 10.0) == (True, 55.0)
    assert not presets.learns([[90, 50], [80, 55]], 50.0)[0]  # two-way multi-head: 55 is near chance
    assert presets.learns([[90, 50], [80, 70]], 50.0)[0]


def test_check_config_keeps_the_preset_and_protocol_and_cuts_a_split_to_the_data():
    data = presets.Data.parse("idx:/data/fashion-mnist", "--mnist-like")
    path = os.path.join(CONFIG_DIR, "split_cifar100.yaml")
    config = presets.check_config(path, "gcl", data, num_tasks=3, samples_per_task=200)
    preset = config_lib.load_config(os.path.join(CONFIG_DIR, "split_cifar100.yaml"), ["method.name=gcl"])
    assert config.method == preset.method and config.model == preset.model and config.train.learning_rate == \
        preset.train.learning_rate
    b = config.benchmark
    assert (b.name, b.multi_head, b.augment) == ("split", True, "flip")
    assert (b.num_tasks, b.classes_per_task, b.samples_per_task) == (3, 3, 200)
    assert (b.source, b.path, config.eval.split) == ("idx", "/data/fashion-mnist", "validation")
    assert b.validation_fraction > 0 and b.image_size is None
    rotated = presets.check_config(os.path.join(CONFIG_DIR, "rotated_mnist.yaml"), "er", data, num_tasks=4)
    assert (rotated.benchmark.name, rotated.benchmark.num_tasks, rotated.method.name) == ("rotated", 4, "er")


def test_set_goes_over_the_preset_and_a_check_is_reused_only_with_the_same_set(tmp_path, monkeypatch):
    """``--set``: e.g. GCL's constructor defaults in place of the ConvNet preset's paper switches;
    a finished check is reused only when it ran with the same ``--set`` and the same preset."""
    from gcl_tf import train

    data = presets.Data("digits")
    cifar = os.path.join(CONFIG_DIR, "split_cifar10.yaml")
    assert presets.check_config(cifar, "gcl", data).method.kernel_width is None  # the paper's
    defaults = ["method.kernel_width=median", "method.regularize_below=1.0"]
    config = presets.check_config(cifar, "gcl", data, overrides=defaults)
    assert (config.method.kernel_width, config.method.regularize_below) == ("median", 1.0)
    assert config.model.backbone == "convnet" and config.eval.split == "validation"

    quick = os.path.join(CONFIG_DIR, "quickstart.yaml")
    folder = str(tmp_path / "run")
    stream = dict(num_tasks=2, samples_per_task=100)
    plain = presets.check(quick, "er", data, folder, **stream)
    assert plain["overrides"] == []
    # only what the report is made of stays: no checkpoints, learner, TensorBoard events, artifacts
    assert sorted(os.listdir(folder)) == ["check.json", "config.yaml", "results.json"]
    lower = presets.check(quick, "er", data, folder, overrides=["train.learning_rate=0.001"], **stream)
    assert lower["overrides"] == ["train.learning_rate=0.001"] and lower["acc"] != plain["acc"]

    def no_training(*args, **kwargs):
        raise AssertionError("a finished check with the same --set ran again")

    monkeypatch.setattr(train, "run", no_training)
    assert presets.check(quick, "er", data, folder, overrides=["train.learning_rate=0.001"], **stream) == lower
    with open(quick) as handle:  # the config's preset edited since: checked again
        edited = handle.read().replace("memory_size: 200", "memory_size: 100")
    assert edited != open(quick).read()
    (tmp_path / "quickstart.yaml").write_text(edited)
    with pytest.raises(AssertionError, match="ran again"):
        presets.check(str(tmp_path / "quickstart.yaml"), "er", data, folder,
                      overrides=["train.learning_rate=0.001"], **stream)


def test_the_verdict_line_says_what_it_measures_and_that_acc_is_not_it():
    """A split stream that learns each new task and forgets the earlier ones: "learns" stands
    with the new-task accuracy and its threshold, not next to an ACC of 13.6 as if it judged it."""
    row = {"config": "split_fashion_mnist", "method": "gcl", "acc": 13.6, "new_task_accuracy": 55.0,
           "chance": 10.0, "threshold": 32.5, "learns": True}
    assert presets.verdict(row) == (
        "split_fashion_mnist      gcl      learns each new task: yes (new-task accuracy  55.0 >= threshold 32.5)  "
        "ACC  13.6 (every task at the end)")
    stalled = presets.verdict({**row, "new_task_accuracy": 10.2, "learns": False, "note": "samples per task cut"})
    assert "learns each new task: NO  (new-task accuracy  10.2 <  threshold 32.5)" in stalled
    assert stalled.endswith("(every task at the end)  (samples per task cut)")


def test_data_option_errors_are_one_line():
    with pytest.raises(UserError, match="unknown source 'tfds'"):
        presets.Data.parse("tfds:mnist", "--rgb")
    with pytest.raises(UserError, match="needs a path"):
        presets.Data.parse("npz", "--rgb")


def mnist_like_gcl_configs():
    out = []
    for path in CONFIGS:
        raw = config_lib.load_yaml(path)
        if "gcl" in (raw.get("presets") or {}) and not presets.is_rgb(config_lib.resolve(raw, ["method.name=gcl"])):
            out.append(path)
    return out


def test_every_config_with_an_mlp_gcl_preset_is_checked_here():
    names = {os.path.basename(p) for p in mnist_like_gcl_configs()}
    assert {"quickstart.yaml", "permuted_mnist.yaml", "rotated_mnist.yaml", "permuted_fashion_mnist.yaml",
            "rotated_fashion_mnist.yaml", "split_fashion_mnist.yaml"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("path", mnist_like_gcl_configs(), ids=lambda p: os.path.basename(p)[:-5])
def test_gcl_preset_learns_on_real_digits(path, tmp_path):
    """The config's GCL preset, its protocol, 3 tasks of 500 real digits: each new task is learned
    far above chance (the shipped paper presets stayed at 10% after the first task)."""
    per_task = None if "split" in os.path.basename(path) else 500  # a digits class pair has ~270
    row = presets.check(path, "gcl", presets.Data("digits"), str(tmp_path / "run"), num_tasks=3,
                        samples_per_task=per_task)
    assert row["learns"], row
    if per_task is not None:  # a permuted or rotated stream keeps earlier tasks well above chance too
        assert np.isfinite(row["acc"]) and row["acc"] > row["chance"] + 20.0, row


@pytest.mark.slow  # the command in a second process, one short run
def test_presets_command_cuts_short_tasks_skips_a_broken_config_and_writes_the_report(tmp_path):
    """The README's command on the default data (digits, no Fashion-MNIST): a split config, whose
    class pairs hold ~270 samples, not the default 500, runs cut to what the data has (noted); a
    config that cannot run is skipped with one line naming it; the report says what "learns"
    measures (new-task accuracy) next to ACC, and the start is quiet."""
    import json
    import subprocess
    import sys

    from conftest import REPO
    from helpers import TF_STARTUP_LOG, without_tf_log_level

    broken = tmp_path / "broken.yaml"
    broken.write_text("benchmark: {name: permuted, dataset: digits, source: digits, num_tasks: 3}\n"
                      "method: {name: er, memory_size: -1}\n")
    out = tmp_path / "presets"
    proc = subprocess.run([sys.executable, "-m", "gcl_tf.benchmark", "presets", "--configs",
                           os.path.join(CONFIG_DIR, "split_fashion_mnist.yaml"), str(broken), "--methods", "er",
                           "--output", str(out)], capture_output=True, text=True, cwd=REPO,
                          env=without_tf_log_level(), timeout=900)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]  # 1: a config was skipped
    assert not TF_STARTUP_LOG.search(proc.stderr), proc.stderr[-3000:]
    assert f"broken er: skipped ({broken}: method.memory_size" in proc.stdout, proc.stdout
    rows = json.loads((out / "presets.json").read_text())
    split, skipped = rows
    config = presets.check_config(os.path.join(CONFIG_DIR, "split_fashion_mnist.yaml"), "er", presets.Data("digits"))
    from gcl_tf.data import make_source

    fewest = min(presets.available_per_task(config, make_source(config.benchmark)))
    assert fewest < 500 and split["samples_per_task"] == fewest and split["learns"], split
    assert split["note"] == f"samples per task cut from 500 to {fewest}: the fewest a task of this stream has in digits"
    assert skipped["config"] == "broken" and skipped["learns"] is None and "memory_size" in skipped["skipped"]
    report = (out / "presets.md").read_text()
    assert "**new-task accuracy**: the accuracy on each task just after learning it" in report
    assert "| ACC | new-task accuracy | chance | threshold | learns (new-task accuracy >= threshold) |" in report
    assert f"| split_fashion_mnist | digits | er | 3 x {fewest} | {split['acc']:.1f} |" in report
    assert "Skipped:" in report and "- broken er: method.memory_size: -1 is out of range" in report
    assert "split_fashion_mnist      er       learns each new task: yes (new-task accuracy " in proc.stdout
    runs = out / "runs" / "split_fashion_mnist" / "er"
    assert sorted(os.listdir(runs)) == ["check.json", "config.yaml", "results.json"]
    assert f"{out / 'runs'} keeps each run's check.json, config.yaml, results.json only (" in proc.stdout
