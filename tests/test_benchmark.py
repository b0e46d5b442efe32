"""The paper's suite on a tiny stream: every run, table, figure and artifact, the tables' numbers,
reruns that skip finished runs, plots from saved results, one-line mistakes and the paper's
defaults."""
from __future__ import annotations

import glob
import json
import os
import sys

import numpy as np
import pytest
from benchmark_harness import (
    FIGURES,
    PNG_MAGIC,
    TABLES,
    forbid_training,
    one_line_error,
    read_csv,
    results_of,
    snapshot,
)

from gcl_tf import machine

from conftest import REPO
from tiny_suite import BENCHMARK, SEEDS, VARIANTS, build, copy_suite, suite_args


@pytest.mark.slow
def test_paper_suite_writes_every_run_table_figure_and_artifact():
    _, output = build()
    # Every (variant, seed) in its own folder with its results.
    assert set(results_of(output)) == {(v, s) for v, _ in VARIANTS for s in range(SEEDS)}
    for (variant, seed), results in results_of(output).items():
        method = dict(VARIANTS)[variant]
        assert results["method"] == method and results["seed"] == seed
        assert np.asarray(results["accuracy_matrix"]).shape == (2, 2)
        evaluations = 1 + len(results["evaluations"])  # each evaluation variant evaluates every task again
        assert results["train_samples"] == 2 * 60 and results["eval_samples"] == evaluations * 2 * 2 * 100
        assert results["machine"] == machine.describe()  # the machine its times are of
    # The studies' settings reached the runs' configs.
    configs = {k: r["config"]["method"] for k, r in results_of(output).items()}
    assert configs[("gcl-no_graph_reg", 0)]["graph_lambda"] == 0
    assert configs[("gcl-no_graph_reg", 1)]["also_test_graph_samples"] == [1]
    for seed in range(SEEDS):  # the one-sample column: a second evaluation of the same run
        one = results_of(output)[("gcl-no_graph_reg", seed)]["evaluations"]["one_sample"]
        assert one["settings"] == {"test_graph_samples": 1} and np.asarray(one["accuracy_matrix"]).shape == (2, 2)
    assert configs[("gcl-no_graph_reg-one_sample-deterministic", 0)]["stochastic_graphs"] is False
    assert configs[("gcl", 0)]["graph_lambda"] == 50 and configs[("gcl", 0)]["stochastic_graphs"] is True
    assert configs[("er-memory20", 1)]["memory_size"] == 20 and configs[("er", 1)]["memory_size"] == 40
    assert configs[("gcl-memory20", 0)]["memory_size"] == 20

    for name in TABLES:
        assert os.path.getsize(os.path.join(output, "tables", name)) > 0, name
    for name in FIGURES:
        with open(os.path.join(output, "figures", name), "rb") as handle:
            data = handle.read()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, name
    index = open(os.path.join(output, "README.md"), encoding="utf-8").read()
    assert all(f"figures/{name}" in index for name in FIGURES)
    assert "python -m gcl_tf.benchmark paper --config-dir" in index  # the command next to the numbers

    # Artifacts: embeddings for every method, GCL's context graph between the filled memory slots.
    gcl = np.load(os.path.join(output, "runs", BENCHMARK, "gcl", "seed0", "artifacts.npz"))
    assert gcl["context_graph"].shape == (40, 40) and gcl["memory_labels"].shape == (40,)
    graph = gcl["context_graph"]
    assert np.all((graph >= 0) & (graph <= 1)) and np.all(np.diag(graph) == 0)
    assert gcl["embeddings"].shape == (200, 2 * 32) and gcl["class_embeddings"].shape == (10, 2 * 32)
    finetune = np.load(os.path.join(output, "runs", BENCHMARK, "finetune", "seed0", "artifacts.npz"))
    assert "context_graph" not in finetune.files
    assert finetune["embeddings"].shape == (200, 32) and finetune["class_embeddings"].shape == (10, 32)
    np.testing.assert_array_equal(finetune["embedding_labels"], gcl["embedding_labels"])  # same images
    assert np.bincount(finetune["embedding_tasks"]).tolist() == [100, 100]  # from every task


@pytest.mark.slow
def test_context_graph_artifact_is_the_models_expected_graph(make_config, tmp_path):
    """sigmoid(edge logits) of the model's own embeddings of the filled slots; self-edges removed."""
    import tensorflow as tf

    from gcl_tf import train
    from gcl_tf.methods.gcl import graph as gcl_lib

    config = make_config({"method": {"name": "gcl", "memory_size": 50, "test_graph_samples": 2},
                          "benchmark": {"num_tasks": 1, "samples_per_task": 30, "test_samples_per_task": 20}})
    model = train.train_model(config, str(tmp_path / "run"), verbose=0).model
    saved = np.load(tmp_path / "run" / "artifacts.npz")
    assert saved["context_graph"].shape == (30, 30)  # 30 samples seen: 30 of the 50 slots filled
    u, _ = model.embed(model.memory.images[:30], training=False)
    expected = tf.sigmoid(gcl_lib.edge_logits(u, u, model.kernel_log_scale)).numpy()
    np.fill_diagonal(expected, 0.0)
    np.testing.assert_allclose(saved["context_graph"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(saved["memory_labels"], model.memory.labels.numpy()[:30])


@pytest.mark.slow  # trains the tiny suite (tiny_suite.build) unless a slow test did
def test_tensorboard_shows_the_context_graph_at_each_task_end():
    import tensorflow as tf

    _, output = build()

    def image_steps(run):
        steps = []
        for path in glob.glob(os.path.join(output, "runs", BENCHMARK, run, "seed0", "tensorboard", "events.*")):
            for event in tf.compat.v1.train.summary_iterator(path):
                steps += [event.step for value in event.summary.value if value.tag == "context_graph"]
        return steps

    assert sorted(image_steps("gcl")) == [1, 2]
    assert image_steps("finetune") == []


def test_graph_image_sorts_rows_and_columns_by_label():
    from gcl_tf.benchmark.plots import sort_by_label
    from gcl_tf.callbacks import graph_image

    labels = np.array([2, 0, 1, 0])
    graph = np.arange(16, dtype=float).reshape(4, 4) / 16
    order = [1, 3, 2, 0]  # stable: the two 0s keep their order
    sorted_graph, sorted_labels = sort_by_label(graph, labels)
    np.testing.assert_array_equal(sorted_graph, graph[order][:, order])
    assert sorted_labels.tolist() == [0, 0, 1, 2]
    image = graph_image(graph, labels)
    assert image.shape == (4, 4, 3) and image.dtype == np.float32
    from matplotlib import colormaps
    np.testing.assert_allclose(image, colormaps["viridis"](graph[order][:, order])[..., :3], atol=1e-6)


@pytest.mark.slow  # trains the tiny suite (tiny_suite.build) unless a slow test did
def test_tables_hold_numpys_mean_and_std_over_the_runs():
    _, output = build()
    results = results_of(output, derived=True)

    def stats(variant, key):
        values = np.array([results[(variant, s)][key] for s in range(SEEDS)], dtype=float)
        return values.mean(), values.std(ddof=1)

    main = {row["method"]: row for row in read_csv(os.path.join(output, "tables", "main_results.csv"))}
    assert set(main) == {"finetune", "er", "gcl"}
    for method, row in main.items():
        assert row["benchmark"] == BENCHMARK and int(row["seeds"]) == SEEDS
        for key in ("acc", "fgt", "bwt"):
            mean, std = stats(method, key)
            assert float(row[f"{key}_mean"]) == pytest.approx(mean, abs=1e-9)
            assert float(row[f"{key}_std"]) == pytest.approx(std, abs=1e-9)
        train_ms = [1000 * results[(method, s)]["train_seconds"] / results[(method, s)]["train_samples"]
                    for s in range(SEEDS)]
        assert float(row["train_ms_mean"]) == pytest.approx(np.mean(train_ms))
    # The paper-layout table shows the same numbers, rounded, methods in the paper's order.
    table = read_csv(os.path.join(output, "tables", "table_other.csv"))
    assert [row["Method"] for row in table] == ["Finetune", "ER", "GCL"]
    for row in table:
        method = row["Method"].lower()
        for key, column in (("acc", "ACC"), ("fgt", "FGT")):
            mean, std = stats(method, key)
            assert row[f"tiny digits {column} ({'↑' if key == 'acc' else '↓'})"] == f"{mean:.2f} ± {std:.2f}"
    markdown = open(os.path.join(output, "tables", "table_other.md"), encoding="utf-8").read()
    mean, std = stats("gcl", "acc")
    assert f"| GCL | {mean:.2f} ± {std:.2f} |" in markdown

    ablation = {row["variant"]: row for row in read_csv(os.path.join(output, "tables", "ablation.csv"))}
    assert list(ablation) == ["gcl", "gcl-no_graph_reg", "gcl-no_graph_reg-one_sample",
                              "gcl-no_graph_reg-one_sample-deterministic"]
    assert [ablation[v]["graph_regularization"] for v in ablation] == ["1", "0", "0", "0"]
    assert [ablation[v]["multiple_graph_samples"] for v in ablation] == ["1", "1", "0", "0"]
    assert [ablation[v]["random_graphs"] for v in ablation] == ["1", "1", "1", "0"]
    for variant, row in ablation.items():
        for key in ("acc", "fgt"):
            mean, std = stats(variant, key)
            assert float(row[f"{key}_mean"]) == pytest.approx(mean, abs=1e-9)
            assert float(row[f"{key}_std"]) == pytest.approx(std, abs=1e-9)

    memory = {(row["method"], int(row["memory_size"])): row
              for row in read_csv(os.path.join(output, "tables", "memory.csv"))}
    expected_variant = {("er", 20): "er-memory20", ("er", 40): "er", ("gcl", 20): "gcl-memory20", ("gcl", 40): "gcl"}
    assert set(memory) == set(expected_variant)
    for key, variant in expected_variant.items():
        for metric in ("acc", "fgt", "train_seconds"):
            mean, std = stats(variant, metric)
            assert float(memory[key][f"{metric}_mean"]) == pytest.approx(mean, abs=1e-9)
            assert float(memory[key][f"{metric}_std"]) == pytest.approx(std, abs=1e-9)


@pytest.mark.slow
def test_rerun_skips_finished_runs_and_resumes_a_missing_one(tmp_path, monkeypatch, capsys):
    from gcl_tf import train
    from gcl_tf.benchmark import paper

    config_dir, output = copy_suite(tmp_path)
    before = snapshot(output)
    forbid_training(monkeypatch)
    assert paper.main(suite_args(config_dir, output)) == 0
    assert snapshot(output) == before  # nothing recomputed, nothing rewritten
    assert f"trained 0, skipped {len(VARIANTS) * SEEDS}" in capsys.readouterr().out  # 14

    # An interrupted suite: one run's results are missing -> only that run is trained again.
    missing = os.path.join(output, "runs", BENCHMARK, "gcl-no_graph_reg", "seed1", "results.json")
    os.remove(missing)
    calls = []
    monkeypatch.undo()  # the real train.run again
    real_run = train.run

    def counting(config, output_dir=None, **kwargs):
        calls.append(output_dir)
        return real_run(config, output_dir=output_dir, **kwargs)

    monkeypatch.setattr(train, "run", counting)
    assert paper.main(suite_args(config_dir, output)) == 0
    assert calls == [os.path.dirname(missing)]
    after = snapshot(output)
    changed = {path for path in after if after[path] != before.get(path)}
    assert missing in changed  # rewritten, and nothing outside the recomputed run's folder
    assert all(os.path.dirname(path) == os.path.dirname(missing) for path in changed), changed


@pytest.mark.slow
def test_plots_redraws_every_table_and_figure_from_saved_results_only(tmp_path, monkeypatch):
    from gcl_tf.benchmark import plots

    _, output = copy_suite(tmp_path)
    for folder in ("figures", "tables"):
        for path in glob.glob(os.path.join(output, folder, "*")):
            os.remove(path)
    os.remove(os.path.join(output, "README.md"))
    forbid_training(monkeypatch)
    import keras

    monkeypatch.setattr(keras.Model, "fit", lambda *a, **k: (_ for _ in ()).throw(AssertionError("fit called")))
    assert plots.main([output]) == 0
    assert sorted(os.listdir(os.path.join(output, "figures"))) == sorted(FIGURES)
    assert sorted(os.listdir(os.path.join(output, "tables"))) == sorted(TABLES)
    _, original = build()
    for name in TABLES:  # the same tables as the suite wrote
        assert open(os.path.join(output, "tables", name), encoding="utf-8").read() == \
            open(os.path.join(original, "tables", name), encoding="utf-8").read(), name
    assert os.path.isfile(os.path.join(output, "README.md"))


@pytest.mark.slow  # trains the tiny suite (tiny_suite.build) unless a slow test did
def test_a_finished_run_with_another_config_stops_the_suite(tmp_path, monkeypatch, capsys):
    from gcl_tf.benchmark import paper

    config_dir, output = copy_suite(tmp_path)
    forbid_training(monkeypatch)
    line = one_line_error(capsys, lambda: paper.main(suite_args(config_dir, output) + ["--set", "train.epochs=2"]))
    assert "another config" in line and "train.epochs" in line and "--output" in line


@pytest.mark.slow  # trains the tiny suite (tiny_suite.build) unless a slow test did
def test_a_key_added_since_a_run_finished_keeps_it_finished(tmp_path, monkeypatch):
    """A finished run's results.json holds the keys of its day; a method key added since (here
    GCL's kernel_start_edge, removed from every saved config) takes its default when the suite
    compares, as --resume reads a run's config.yaml: the runs stay finished, nothing trains."""
    import glob

    from gcl_tf.benchmark import paper

    config_dir, output = copy_suite(tmp_path)
    changed = 0
    for path in glob.glob(os.path.join(output, "runs", "**", "results.json"), recursive=True):
        with open(path, encoding="utf-8") as f:
            results = json.load(f)
        if results["config"]["method"].pop("kernel_start_edge", None) is not None:
            changed += 1
            with open(path, "w", encoding="utf-8") as f:
                json.dump(results, f)
    assert changed > 0
    forbid_training(monkeypatch)
    assert paper.main(suite_args(config_dir, output)) == 0


@pytest.mark.parametrize("args, fragments", [
    (["--benchmarks", "nope"], ["--benchmarks", "nope", "allowed", "split_cifar10"]),
    (["--benchmarks", "split_cifar10", "--studies", "main,speed"], ["--studies", "speed", "main, ablation, memory"]),
    (["--benchmarks", "split_cifar10", "--methods", "gcll"], ["--methods", "gcll", "allowed"]),
    (["--benchmarks", "split_cifar10", "--studies", "main,backbone", "--backbones", "convnet,vgg"],
     ["--backbones: unknown trunk 'vgg'; allowed: convnet, resnet18"]),
    (["--benchmarks", "split_cifar10", "--studies", "graph_lambda", "--graph-lambdas", "0,-5"],
     ["--graph-lambdas: '-5' is not allowed; allowed: numbers 0 or more"]),
    (["--benchmarks", "split_cifar10", "--studies", "graph_lambda", "--graph-lambdas", "5,lots"],
     ["--graph-lambdas: 'lots' is not allowed"]),
    (["--benchmarks", "split_cifar10", "--set", "train.lr=1"], ["train.lr", "learning_rate"]),
    (["--benchmarks", "split_miniimagenet", "--seeds", "1"],
     ["split_miniimagenet", "benchmark.path", "/path/to/miniimagenet", "does not exist"]),
])
def test_user_mistakes_are_one_line_and_exit_2(tmp_path, monkeypatch, capsys, args, fragments):
    from gcl_tf.benchmark import paper

    forbid_training(monkeypatch)
    monkeypatch.chdir(REPO)  # --config-dir defaults to configs/
    line = one_line_error(capsys, lambda: paper.main(args + ["--output", str(tmp_path / "out")]))
    for fragment in fragments:
        assert fragment in line, (fragment, line)


def test_the_backbone_study_on_mlp_benchmarks_is_refused_in_one_line_before_tensorflow(tmp_path):
    """python -m gcl_tf.benchmark paper --backbone-benchmarks all on MNIST benchmarks (MLP presets:
    no ConvNet or ResNet-18 trunk to swap): one line naming them and the benchmarks allowed,
    exit status 2, nothing written, and TensorFlow never imported (-X importtime lists every import)."""
    import subprocess

    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "gcl_tf.benchmark", "paper", "--output", str(out),
                           "--benchmarks", "permuted_mnist,rotated_mnist", "--studies", "main,backbone",
                           "--backbone-benchmarks", "all", "--seeds", "1", "--dry-run"],  # never trains
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    imports = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0] == (
        "error: --backbone-benchmarks all: none of permuted_mnist, rotated_mnist has a preset on a convnet or "
        "resnet18 trunk, the trunks the backbone study swaps (the presets use mlp); allowed: split_cifar10, "
        "split_cifar100, split_cifar10_ocl, split_miniimagenet, split_svhn (each also in --benchmarks)")
    assert imports and not [line for line in imports if line.split("|")[-1].strip() in ("tensorflow", "keras")]
    assert not out.exists()


def test_the_backbone_study_keeps_the_benchmarks_it_applies_to(tmp_path, monkeypatch, capsys):
    """A benchmark named for the backbone study whose presets are MLPs is refused (one line, exit
    2); ``all`` over a selection that mixes MLP and convolutional benchmarks leaves the MLP ones
    out with a note and plans the others'."""
    from gcl_tf.benchmark import paper

    monkeypatch.chdir(REPO)
    forbid_training(monkeypatch)
    line = one_line_error(capsys, lambda: paper.main(["--benchmarks", "permuted_mnist,split_cifar10", "--studies",
                                                      "main,backbone", "--backbone-benchmarks",
                                                      "split_cifar10,permuted_mnist", "--output",
                                                      str(tmp_path / "out")]))
    assert line.startswith("error: --backbone-benchmarks: permuted_mnist has no preset on a convnet or resnet18 "
                           "trunk"), line
    notes = []
    runs = paper.plan(benchmarks=["permuted_mnist", "split_cifar10"], studies=["main", "backbone"], seeds=1,
                      backbone_benchmarks=["all"], methods=["er", "gcl"], log=notes.append)
    assert {(r.benchmark, r.variant) for r in runs if r.study == "backbone"} == {
        ("split_cifar10", "er-convnet"), ("split_cifar10", "gcl-resnet18")}
    assert notes == ["note: the backbone study leaves out permuted_mnist: its presets use mlp, not a convnet or "
                     "resnet18 trunk"]


def test_plots_of_a_folder_without_runs_is_one_line(tmp_path, capsys):
    from gcl_tf.benchmark import plots

    line = one_line_error(capsys, lambda: plots.main([str(tmp_path)]))
    assert "no finished run" in line


@pytest.mark.slow
def test_paper_defaults_follow_the_paper(monkeypatch):
    """Default plan: six benchmarks, every preset, ablation on Split CIFAR10, memory study on
    Split SVHN and Split CIFAR10 at 100, 250, 500, 1000 (250 is the main run), five seeds."""
    from gcl_tf.benchmark import paper

    monkeypatch.chdir(REPO)
    runs = paper.plan(log=lambda text: None)
    seeds = {r.seed for r in runs}
    assert seeds == set(range(5))
    variants = {(r.benchmark, r.variant) for r in runs}
    assert {b for b, _ in variants} == set(paper.PAPER_BENCHMARKS)
    assert ("split_cifar100", "icarl") in variants and ("permuted_mnist", "mer") in variants
    assert ("split_cifar10", "gcl-no_graph_reg-one_sample-deterministic") in variants
    assert ("split_cifar10", "gcl-no_graph_reg-one_sample") not in variants  # an evaluation of gcl-no_graph_reg
    assert not any(v.startswith("gcl-no_graph_reg") for b, v in variants if b != "split_cifar10")
    memory = {(b, v) for b, v in variants if "-memory" in v}
    assert memory == {(b, f"{m}-memory{s}") for b in ("split_svhn", "split_cifar10")
                      for m in ("er", "gcl") for s in (100, 500, 1000)}
    assert len(runs) == len(variants) * 5

