"""Issue 70's switches for the published re-runs' settings: AdamW with decoupled weight decay
(train.optimizer: adamw, train.weight_decay), a random class order per seed (benchmark.class_order),
and what the today's preset reaches with --set (the trunk's width, PyTorch's initialisation)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from faults_harness import Crash, cli_error, crash_after_step, write_config

from gcl_tf.config import TrainConfig, load_config
from gcl_tf.data import ContinualBenchmark
from gcl_tf.data.protocols import split_classes
from gcl_tf.errors import ConfigError

from conftest import REPO

TODAY = os.path.join(REPO, "configs", "split_cifar10_ocl.yaml")


def one_line_error(overrides, path=TODAY) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    assert "\n" not in str(info.value)
    return str(info.value)


# ----------------------------------------------------------------------------- the optimizer
def apply_once(optimizer, weights, gradient):
    import keras

    variable = keras.Variable(np.asarray(weights, np.float32))
    optimizer.apply([keras.ops.convert_to_tensor(np.asarray(gradient, np.float32))], [variable])
    return np.asarray(variable.numpy())


def test_adamw_decays_every_weight_by_learning_rate_times_weight_decay():
    from gcl_tf.optimizers import make_optimizer

    weights = [1.0, -2.0, 0.5]
    adamw = TrainConfig(optimizer="adamw", learning_rate=0.01, weight_decay=0.1)
    adam = TrainConfig(optimizer="adam", learning_rate=0.01)
    # no gradient: Adam leaves the weights; AdamW shrinks them by 1 - lr * wd (PyTorch's AdamW)
    np.testing.assert_allclose(apply_once(make_optimizer(adam), weights, [0, 0, 0]), weights)
    np.testing.assert_allclose(apply_once(make_optimizer(adamw), weights, [0, 0, 0]),
                               np.multiply(weights, 1 - 0.01 * 0.1), rtol=1e-6)
    # with a gradient: the same Adam step, and the decay on top of it (decoupled, not through the moments)
    gradient = [0.3, -1.0, 2.0]
    decayed = apply_once(make_optimizer(adamw), weights, gradient)
    plain = apply_once(make_optimizer(adam), weights, gradient)
    np.testing.assert_allclose(plain - decayed, np.multiply(weights, 0.01 * 0.1), atol=1e-7)


def test_weight_decay_is_validated_in_one_line():
    config = load_config(TODAY, ["method.name=er", "train.optimizer=adamw", "train.weight_decay=1e-4"])
    assert config.train.weight_decay == pytest.approx(1e-4)
    assert "train.weight_decay: adam takes none" in one_line_error(["method.name=er", "train.weight_decay=1e-4"])
    assert "allowed: [0, 1)" in one_line_error(["method.name=er", "train.optimizer=adamw", "train.weight_decay=-1"])
    assert "allowed: sgd, adam, adamw" in one_line_error(["method.name=er", "train.optimizer=rmsprop"])


def test_a_bad_weight_decay_ends_the_command_line_with_exit_2(capsys):
    from gcl_tf import train

    line = cli_error(train.main, ["--config", TODAY, "--set", "train.weight_decay=0.1"], capsys)
    assert line == "error: train.weight_decay: adam takes none (got 0.1); allowed: 0, or train.optimizer: adamw " \
                   "(decoupled weight decay)"


# ----------------------------------------------------------------------------- the class order
def split_bench(npz_config, seed, **keys):
    config = npz_config({"name": "split", "num_tasks": 5, "classes_per_task": 2, **keys}, [f"seed={seed}"])
    return ContinualBenchmark(config.benchmark, config.seed)


def task_classes(benchmark):
    return [tuple(int(k) for k in task.classes) for task in benchmark.tasks]


def test_random_class_order_is_drawn_by_seed_and_tasks_still_partition_the_classes(npz_config, npz_file):
    _, (_, y_train, _, y_test) = npz_file
    fixed = task_classes(split_bench(npz_config, 0))
    assert fixed == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]  # the default stays the paper's order
    orders = {seed: task_classes(split_bench(npz_config, seed, class_order="random")) for seed in range(4)}
    assert orders[0] == task_classes(split_bench(npz_config, 0, class_order="random"))  # the same seed, the same
    assert len(set(map(tuple, orders.values()))) == 4  # each seed its own order
    assert all(order != fixed for order in orders.values())
    for seed, order in orders.items():
        assert sorted(k for group in order for k in group) == list(range(10))  # every class once
        for task in split_bench(npz_config, seed, class_order="random").tasks:  # each task's data: its classes
            assert set(np.unique(task.train_data.labels)) == set(task.classes)
            assert len(task.train_data) == np.isin(y_train, task.classes).sum()
            assert len(task.test_data) == np.isin(y_test, task.classes).sum()
    # a task is the same whichever tasks run with it (benchmark.tasks: a stream learned in parts)
    assert task_classes(split_bench(npz_config, 2, class_order="random", tasks=[3, 1])) == [orders[2][3], orders[2][1]]


def test_class_order_is_the_split_protocols_only(npz_config):
    with pytest.raises(ConfigError, match="benchmark.class_order: permuted tasks each hold every class"):
        npz_config({"class_order": "random"})
    assert "allowed: fixed, random" in one_line_error(["benchmark.class_order=shuffled"])


def test_random_class_order_reads_the_same_from_a_folder_and_tfds(tmp_path, make_config, monkeypatch):
    import tensorflow_datasets as tfds
    from test_sources import write_png_folder

    write_png_folder(tmp_path / "imgs", {f"c{k}": 3 for k in range(6)})
    split = {"name": "split", "num_tasks": 3, "classes_per_task": 2, "class_order": "random",
             "samples_per_task": None, "dataset": "x"}
    folder = make_config({"benchmark": {**split, "source": "folder", "path": str(tmp_path / "imgs")}}, ["seed=5"])
    expected = [tuple(int(k) for k in g) for g in split_classes(6, 3, 2, "random", 5)]
    assert task_classes(ContinualBenchmark(folder.benchmark, folder.seed)) == expected
    with tfds.testing.mock_data(num_examples=60):
        config = make_config({"benchmark": {**split, "source": "tfds", "dataset": "cifar10"}}, ["seed=5"])
        benchmark = ContinualBenchmark(config.benchmark, config.seed)
    assert task_classes(benchmark) == [tuple(int(k) for k in g) for g in split_classes(10, 3, 2, "random", 5)]
    for task in benchmark.tasks:
        assert set(np.unique(task.train_data.labels)) <= set(task.classes)


def test_a_resumed_run_keeps_its_random_class_order_and_results_json_records_it(tmp_path, monkeypatch):
    from reliability_harness import results_of

    from gcl_tf import train

    run = {"seed": 3, "benchmark": {"name": "split", "num_tasks": 3, "classes_per_task": 2, "class_order": "random"},
           "method": {"name": "er", "memory_size": 20}, "train": {"checkpoint_every": 3}}
    config = write_config(tmp_path, run)
    assert train.main(["--config", config, "--output", str(tmp_path / "whole")]) == 0
    crash_after_step(monkeypatch, 14)  # in the second task
    with pytest.raises(Crash):
        train.main(["--config", config, "--output", str(tmp_path / "run")])
    monkeypatch.undo()
    assert train.main(["--config", config, "--output", str(tmp_path / "run"), "--resume"]) == 0
    expected = [[int(k) for k in g] for g in split_classes(10, 3, 2, "random", 3)]
    assert expected != [[0, 1], [2, 3], [4, 5]]
    whole, resumed = results_of(tmp_path / "whole"), results_of(tmp_path / "run")
    assert whole["task_classes"] == resumed["task_classes"] == expected
    assert resumed["config"]["benchmark"]["class_order"] == "random"
    assert resumed["accuracy_matrix"] == whole["accuracy_matrix"]


# ----------------------------------------------------------------------------- the today's preset
@pytest.mark.parametrize("method", ["er", "er_ace", "derpp", "mir", "onpro"])
def test_the_reruns_values_are_reachable_from_the_todays_preset(method):
    """mkd_ocl's and CCL-DC's settings, each by --set over the today's preset."""
    config = load_config(TODAY, [f"method.name={method}", "model.filters=64", "model.initializer=torch",
                                 "benchmark.class_order=random", "train.optimizer=adamw",
                                 "train.learning_rate=0.0005", "train.weight_decay=0.0001"])
    assert (config.model.backbone, config.model.filters, config.model.initializer) == ("resnet18", 64, "torch")
    assert (config.benchmark.class_order, config.train.optimizer) == ("random", "adamw")
    assert (config.train.learning_rate, config.train.weight_decay) == (pytest.approx(5e-4), pytest.approx(1e-4))
    preset = load_config(TODAY, [f"method.name={method}"])  # and the defaults stay the paper's / the preset's
    assert (preset.benchmark.class_order, preset.train.weight_decay) == ("fixed", 0.0)


# ----------------------------------------------------------------------------- the rule's script
def rule_script(tmp_path, monkeypatch, scores: dict):
    """docs/results/split_cifar10_ocl/rerun_switches.py with its runs' folders in ``tmp_path``,
    each run of ``scores`` finished at that validation ACC."""
    import importlib.util
    import json

    path = os.path.join(REPO, "docs", "results", "split_cifar10_ocl", "rerun_switches.py")
    spec = importlib.util.spec_from_file_location("rerun_switches", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "OUT", str(tmp_path))
    monkeypatch.setattr(script, "EARLIER", {})
    for name, acc in scores.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"acc": acc}))
    return script


def test_the_rule_adopts_a_switch_only_past_its_margin_and_one_optimizer_at_most(tmp_path, monkeypatch):
    script = rule_script(tmp_path, monkeypatch, {"derpp-preset": 47.0, "derpp-mkd_ocl": 50.0,
                                                  "derpp-mkd_ocl_one_pass": 52.5, "derpp-ccl_dc": 49.5,
                                                  "derpp-torch_init": 49.2, "derpp-memory_bn": 48.9,
                                                  "er-preset": 50.0})
    assert script.adopted("er") == []  # a run missing: nothing decided yet
    assert script.adopted("derpp") == ["torch_init", "mkd_ocl_one_pass"]  # 2.2 > 2; the best optimizer only
    for method in script.METHODS:  # rule 7: the memory's statistics at test time, a switch of each method
        config = load_config(TODAY, [f"method.name={method}", *script.SWITCHES[method, "memory_bn"]])
        assert config.method.test_batchnorm == "memory"
    width = script.plan("width")
    adopted = ["model.initializer=torch", *script.SWITCHES["derpp", "mkd_ocl_one_pass"]]
    assert width["derpp-adopted"] == ("derpp", adopted)
    assert width["derpp-adopted-64"][1][-1] == "model.filters=64"
    assert script.width_decision("derpp") == "not yet"
    (tmp_path / "derpp-adopted").mkdir()
    (tmp_path / "derpp-adopted" / "results.json").write_text('{"acc": 53.0}')
    (tmp_path / "derpp-adopted-64").mkdir()
    (tmp_path / "derpp-adopted-64" / "results.json").write_text('{"acc": 54.5}')
    assert script.width_decision("derpp") == "20 filters (64: +1.50)"  # within the margin: the cheaper trunk


def test_the_rules_derpp_runs_are_the_reruns_settings():
    """mkd_ocl's DER++ (Adam 1e-4, alpha 0.2, beta 1.0) and CCL-DC's (AdamW 5e-4, decay 1e-4), over
    the today's preset, which keeps its own values (SGD 0.03, 0.1, 0.5, the authors' separate runs)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "rerun_switches", os.path.join(REPO, "docs", "results", "split_cifar10_ocl", "rerun_switches.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    base = ["method.name=derpp"]
    mkd = load_config(TODAY, base + script.SWITCHES["derpp", "mkd_ocl"])
    assert (mkd.train.optimizer, mkd.train.learning_rate, mkd.method.alpha, mkd.method.beta, mkd.method.one_pass) \
        == ("adam", pytest.approx(1e-4), 0.2, 1.0, False)
    ccl = load_config(TODAY, base + script.SWITCHES["derpp", "ccl_dc"])
    assert (ccl.train.optimizer, ccl.train.learning_rate, ccl.train.weight_decay) == \
        ("adamw", pytest.approx(5e-4), pytest.approx(1e-4))
    preset = load_config(TODAY, base)
    assert (preset.train.optimizer, preset.train.learning_rate, preset.method.alpha, preset.method.beta,
            preset.method.one_pass) == ("sgd", pytest.approx(0.03), 0.1, 0.5, False)


def test_rule_7b_decides_ers_memory_statistics_by_the_mean_over_seeds_0_to_2(tmp_path, monkeypatch):
    """ER's memory_bn is adopted when its validation ACC less the preset's, averaged over seeds 0-2, passes
    the margin: seed 0 alone does not decide it, and nothing is decided while one of the six runs is missing."""
    scores = {"er-preset": 55.3, "er-mkd_ocl": 54.6, "er-ccl_dc": 50.4, "er-torch_init": 53.5, "er-memory_bn": 54.8}
    script = rule_script(tmp_path, monkeypatch, scores)
    runs = script.plan("memory_bn_seeds")
    assert runs["er-memory_bn-seed2"] == ("er", ["method.test_batchnorm=memory", "seed=2"])
    assert runs["er-preset-seed1"] == script.plan("order")["er-preset-seed1"]  # one run serves both studies
    assert script.over_seeds("er", "memory_bn") is None and script.adopted("er") == []
    for name, value in {"er-preset-seed1": 50.0, "er-memory_bn-seed1": 54.0, "er-preset-seed2": 50.0}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"acc": value}))
    assert script.adopted("er") == []  # seed 2's run missing
    (tmp_path / "er-memory_bn-seed2").mkdir()
    (tmp_path / "er-memory_bn-seed2" / "results.json").write_text('{"acc": 53.0}')
    assert script.over_seeds("er", "memory_bn") == pytest.approx((-0.5 + 4.0 + 3.0) / 3)  # 2.17 > 2
    assert script.adopted("er") == ["memory_bn"]
    (tmp_path / "er-memory_bn-seed2" / "results.json").write_text('{"acc": 52.0}')
    assert script.adopted("er") == []  # 1.83: within the margin
