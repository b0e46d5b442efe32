"""``python -m gcl_tf.benchmark``: the paper suite (resume, studies), its tables (numbers equal
to numpy's over the runs' results.json) and figures (redrawn from saved results only)."""
from __future__ import annotations

import csv
import glob
import json
import os
import sys
import types

import numpy as np
import pytest

from gcl_tf import machine

from conftest import REPO
from tiny_suite import BENCHMARK, SEEDS, VARIANTS, build, copy_suite, suite_args

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TABLES = ("table_other.md", "table_other.csv", "main_results.csv", "timing.md", "timing.csv",
          "ablation.md", "ablation.csv", "memory.md", "memory.csv")
FIGURES = (f"accuracy_tasks_{BENCHMARK}.png", f"context_graph_{BENCHMARK}.png", f"tsne_{BENCHMARK}.png",
           f"timing_{BENCHMARK}.png", "memory_acc.png", "memory_fgt.png")


def results_of(output, derived=False):
    """{(variant, seed): results} read straight from the runs' results.json files; ``derived``:
    also the ablation's one-sample column, the no-regularisation run's one-sample evaluation."""
    out = {}
    for path in glob.glob(os.path.join(output, "runs", BENCHMARK, "*", "seed*", "results.json")):
        seed_dir = os.path.dirname(path)
        with open(path, encoding="utf-8") as handle:
            out[(os.path.basename(os.path.dirname(seed_dir)), int(os.path.basename(seed_dir)[4:]))] = json.load(handle)
    if derived:
        for (variant, seed), results in list(out.items()):
            if variant == "gcl-no_graph_reg":
                one = results["evaluations"]["one_sample"]
                out[("gcl-no_graph_reg-one_sample", seed)] = {"acc": one["acc"], "fgt": one["fgt"]}
    return out


def read_csv(path):
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def snapshot(output):
    """mtime of every results.json and artifacts.npz."""
    files = glob.glob(os.path.join(output, "runs", "**", "*.json"), recursive=True)
    files += glob.glob(os.path.join(output, "runs", "**", "*.npz"), recursive=True)
    return {path: os.stat(path).st_mtime_ns for path in files}


def forbid_training(monkeypatch):
    from gcl_tf import train

    def refuse(*args, **kwargs):
        raise AssertionError("train.run was called")

    monkeypatch.setattr(train, "run", refuse)


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


def one_line_error(capsys, call):
    with pytest.raises(SystemExit) as exit_info:
        call()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0]
    return err[0]


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
    import json

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
                      backbone_benchmarks=["all"], methods=["er", "gcl"], log=notes.append, method_keys=False)
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


def test_dispatcher_lists_every_command_and_dispatches_to_its_main(monkeypatch, capsys):
    import importlib.util

    import gcl_tf.benchmark.__main__ as dispatcher

    assert dispatcher.main([]) == 2
    assert "paper" in capsys.readouterr().err
    assert dispatcher.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in ("paper", "plots", "presets", "throughput", "gpu")), out
    assert all(importlib.util.find_spec(module) is not None for module, _ in dispatcher.COMMANDS.values())
    assert dispatcher.main(["speed"]) == 2 and "unknown command 'speed'" in capsys.readouterr().err

    # A command runs its module's main(argv) with the rest of the arguments.
    fake = types.ModuleType("gcl_tf.speed.throughput")
    fake.main = lambda argv=None: 7 if argv == ["--quick"] else 1
    monkeypatch.setitem(sys.modules, "gcl_tf.speed.throughput", fake)
    assert dispatcher.main(["throughput", "--quick"]) == 7


def test_dry_run_totals_notes_the_data_and_estimates_the_time_from_finished_runs(tmp_path, monkeypatch, capsys):
    """``paper --dry-run``: a line per run, the data each benchmark reads (and whether it is there),
    "N runs: K finished, M to run", and the time the rest should take from the finished runs'
    own times in the same folder (unknown without one). Nothing is trained."""
    from gcl_tf.benchmark import layout, paper
    from gcl_tf.io import write_json_atomic

    from tiny_suite import TINY_CONFIG, write_configs

    forbid_training(monkeypatch)
    config_dir = write_configs(str(tmp_path / "configs"))
    (tmp_path / "configs" / "tiny_idx.yaml").write_text(
        TINY_CONFIG.replace("dataset: digits, source: digits", f"dataset: fm, source: idx, path: {tmp_path / 'no'}"))
    output = str(tmp_path / "suite")
    args = ["--config-dir", config_dir, "--benchmarks", f"{BENCHMARK},tiny_idx", "--methods", "finetune,gcl",
            "--seeds", "2", "--studies", "main", "--output", output, "--dry-run"]

    assert paper.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert len([line for line in out if line.endswith("main     to run")]) == 8  # a line per run
    assert f"data: {BENCHMARK}: scikit-learn's bundled digits (nothing to download)" in out
    assert f"data: tiny_idx: idx {tmp_path / 'no'} (MISSING: set benchmark.path in " \
           f"{os.path.join(config_dir, 'tiny_idx.yaml')} or --set)" in out
    assert "8 runs: 0 finished, 8 to run" in out
    assert f"time to run: unknown (no finished run of the same benchmark and method in {output} to estimate from)" \
        in out

    # Finished runs (their results.json, as a run writes it): seed 0 of both methods on tiny_digits.
    runs = paper.plan(config_dir, [f"{BENCHMARK},tiny_idx"], ["finetune,gcl"], 2, ["main"])
    for run in runs:
        if run.benchmark == BENCHMARK and run.seed == 0:
            seconds = {"finetune": (10.0, 2.0), "gcl": (30.0, 6.0)}[run.method]
            write_json_atomic(os.path.join(layout.run_dir(output, run.benchmark, run.variant, 0), "results.json"),
                              {"config": run.config.to_dict(), "train_seconds": seconds[0],
                               "eval_seconds": seconds[1]})
    assert paper.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert "8 runs: 2 finished, 6 to run" in out
    assert (f"time to run: about 48 s for 2 of the 6 runs (from 2 finished runs in {output}); unknown for the "
            "other 4 (no finished run of their benchmark and method)") in out  # 12 s + 36 s for the seed 1 runs

    assert paper.main(args[:3] + [BENCHMARK] + args[4:]) == 0  # tiny_digits only: every run estimated
    out = capsys.readouterr().out.splitlines()
    assert "4 runs: 2 finished, 2 to run" in out
    assert any(line.startswith("time to run: about 48 s (each run as long as the finished ones") for line in out)

    # A stopped run: its checkpoint of step 25 (of the finished runs' 100) is resumed, and only
    # the steps it has left count: finetune seed 1 takes 9 s instead of 12.
    for run in runs:
        if run.benchmark == BENCHMARK and run.seed == 0:
            path = os.path.join(layout.run_dir(output, run.benchmark, run.variant, 0), "results.json")
            write_json_atomic(path, {**json.loads(open(path).read()), "train_steps": 100})
        if run.benchmark == BENCHMARK and run.seed == 1 and run.method == "finetune":
            stopped = os.path.join(layout.run_dir(output, run.benchmark, run.variant, 1), "checkpoints")
            os.makedirs(stopped)
            open(os.path.join(stopped, "ckpt-25.index"), "w").close()
    assert paper.main(args[:3] + [BENCHMARK] + args[4:]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len([line for line in out if line.endswith("main     to resume from step 25")]) == 1
    assert "4 runs: 2 finished, 2 to run (1 of them from a checkpoint)" in out
    assert any(line.startswith("time to run: about 45 s (each run as long as the finished ones") for line in out)


def test_dry_run_estimates_a_study_from_the_methods_finished_runs_it_does_not_select(tmp_path, monkeypatch, capsys):
    """A study asked for on its own (``--studies graph_lambda``) is estimated from the method's runs
    already finished in the folder though the command does not select them (the main GCL run):
    it said "unknown" while an hour-long GCL run's own time sat beside it."""
    from gcl_tf.benchmark import layout, paper
    from gcl_tf.io import write_json_atomic

    from tiny_suite import write_configs

    forbid_training(monkeypatch)
    config_dir = write_configs(str(tmp_path / "configs"))
    output = str(tmp_path / "suite")
    (main_run,) = paper.plan(config_dir, [BENCHMARK], ["gcl"], 1, ["main"])
    write_json_atomic(os.path.join(layout.run_dir(output, BENCHMARK, main_run.variant, 0), "results.json"),
                      {"method": "gcl", "config": main_run.config.to_dict(), "train_seconds": 50.0,
                       "eval_seconds": 10.0, "train_steps": 12})
    args = ["--config-dir", config_dir, "--benchmarks", BENCHMARK, "--methods", "gcl", "--seeds", "1",
            "--studies", "graph_lambda", "--graph-lambda-benchmarks", "all", "--graph-lambdas", "5,500",
            "--output", output, "--dry-run"]
    assert paper.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert "2 runs: 0 finished, 2 to run" in out  # the main run is not among them
    assert (f"time to run: about 2 min (each run as long as the finished ones of its benchmark and variant, else "
            f"method: 1 finished run in {output})") in out
    assert any(line.startswith("note: the estimate reads 1 run on an unrecorded machine;") for line in out)

    # A run as gcl_tf.train now writes it records its machine: this one's, so no note.
    path = os.path.join(layout.run_dir(output, BENCHMARK, main_run.variant, 0), "results.json")
    write_json_atomic(path, {**json.loads(open(path).read()), "machine": machine.describe()})
    assert paper.main(args) == 0
    assert not any(line.startswith("note:") for line in capsys.readouterr().out.splitlines())


@pytest.mark.parametrize("extra", [0, 3, 20])
def test_every_method_has_its_own_colour_and_marker_in_the_figures(extra):
    """Every method of the registry (and any number of new ones) gets a colour and a marker of
    its own (EWC and DER++ were drawn alike: DER++ fell back to the colour cycle's index), the
    accuracy figure draws them so, and the same method keeps its style whatever else is drawn."""
    from matplotlib.colors import to_rgba

    from gcl_tf import methods
    from gcl_tf.benchmark import plots
    from gcl_tf.benchmark import styles as style_lib
    from gcl_tf.benchmark.layout import RunResult

    names = list(methods.REGISTRY) + [f"new_method{i}" for i in range(extra)]
    matrix = [[90.0, 10.0], [80.0, 85.0]]
    runs = [RunResult("b", name, 0, "", {"accuracy_matrix": matrix}) for name in names]
    lines = plots.accuracy_tasks_figure(runs, "b").axes[0].get_lines()
    assert len(lines) == len(names)
    assert len({to_rgba(line.get_color()) for line in lines}) == len(names)
    assert len({str(line.get_marker()) for line in lines}) == len(names)
    drawn = style_lib.method_styles(names)
    assert sorted(drawn) == sorted(names)
    assert len({to_rgba(colour) for colour, _ in drawn.values()}) == len(names)
    assert len({str(shape) for _, shape in drawn.values()}) == len(names)
    two = plots.accuracy_tasks_figure([run for run in runs if run.variant in ("ewc", "derpp")], "b", drawn)
    assert {to_rgba(line.get_color()) for line in two.axes[0].get_lines()} == \
        {to_rgba(drawn["ewc"][0]), to_rgba(drawn["derpp"][0])}


def test_a_method_is_drawn_alike_in_every_suite():
    """Every registered method has a fixed colour and marker (its class's ``style``): GCL is drawn
    the same whatever else a suite holds (few methods, the CIFAR suite's many study variants, a
    method outside the registry), in the accuracy and timing figures (and the memory one: same styles)."""
    from matplotlib.colors import to_rgba

    from gcl_tf import methods
    from gcl_tf.benchmark import plots
    from gcl_tf.benchmark import styles as style_lib
    from gcl_tf.benchmark.layout import RunResult

    registered = style_lib.registered_styles()
    assert set(registered) == set(methods.REGISTRY)
    assert len({to_rgba(c) for c, _ in registered.values()}) == len(registered)
    assert len({m for _, m in registered.values()}) == len(registered)
    cifar = set(methods.REGISTRY) | {f"{m}-memory{k}" for m in ("er", "gcl") for k in (100, 500, 1000)} | {
        f"{m}-{t}" for m in methods.REGISTRY for t in ("convnet", "resnet18")} | {
        "gcl-no_graph_reg", "gcl-no_graph_reg-one_sample-deterministic"}
    suites = [["gcl"], ["finetune", "er", "gcl"], sorted(cifar), ["gcl", "someone_elses_method"]]
    for names in suites:
        drawn = style_lib.method_styles(names)
        assert drawn["gcl"] == registered["gcl"] == methods.method_class("gcl").style == ("#d62728", "*"), names
        assert all(drawn[m] == registered[m] for m in names if m in methods.REGISTRY)
        assert len({to_rgba(c) for c, _ in drawn.values()}) == len(drawn) == len(set(names))

    def drawn_gcl(names):
        matrix = [[90.0, 10.0], [80.0, 85.0]]
        runs = [RunResult("b", name, 0, "", {"accuracy_matrix": matrix}) for name in names]
        drawn = style_lib.method_styles(names)
        line = [line for line in plots.accuracy_tasks_figure(runs, "b", drawn).axes[0].get_lines()
                if line.get_label().startswith("GCL")][0]
        timing = {("b", m): {"train_ms": (1.0, 0.1, 2), "test_ms": (1.0, 0.1, 2)} for m in names}
        bars = plots.timing_figure(timing, "b", drawn).axes[0].patches
        methods_drawn = sorted(names, key=plots.method_sort_key)
        return to_rgba(line.get_color()), line.get_marker(), bars[methods_drawn.index("gcl")].get_facecolor()

    red = to_rgba("#d62728")
    assert drawn_gcl(["gcl"]) == drawn_gcl(sorted(methods.REGISTRY)) == drawn_gcl(["er", "gcl", "x"]) == \
        (red, "*", red)


# ----------------------------------------------------------------------------- backbone study
CIFAR = os.path.join(REPO, "configs")
TRUNK_KEYS = {"convnet": {"backbone": "convnet", "filters": 64}, "resnet18": {"backbone": "resnet18", "filters": 20}}


def without_trunk(config: dict) -> dict:
    """A config dict without model.backbone and model.filters (the only keys a trunk replaces)."""
    config = json.loads(json.dumps(config))
    for key in ("backbone", "filters"):
        config["model"].pop(key)
    return config


def test_backbone_study_runs_each_preset_on_each_trunk_with_only_the_trunk_replaced():
    """Split CIFAR10's presets: GCL on the ConvNet, the baselines on the ResNet-18. The study adds
    each method on the other trunk (``<method>-<trunk>``), its preset otherwise unchanged (optimizer,
    learning rate, memory, model.hidden_size, method keys), and the run on the preset's own trunk
    is the main run, planned once, whether or not the main study is selected."""
    from gcl_tf.benchmark import paper

    runs = paper.plan(CIFAR, ["split_cifar10"], ["gcl,er,derpp"], 2, ["main,backbone"], log=lambda text: None)
    by_key = {(r.variant, r.seed): r for r in runs}
    assert len(by_key) == len(runs) == 12
    assert {v for v, _ in by_key} == {"gcl", "er", "derpp", "gcl-resnet18", "er-convnet", "derpp-convnet"}
    for variant, method, trunk in (("gcl-resnet18", "gcl", "resnet18"), ("er-convnet", "er", "convnet"),
                                   ("derpp-convnet", "derpp", "convnet")):
        for seed in range(2):
            run, main = by_key[(variant, seed)], by_key[(method, seed)]
            assert run.method == method and run.study == "backbone" and main.study == "main"
            assert run.overrides == [f"method.name={method}", f"model.backbone={trunk}",
                                     f"model.filters={TRUNK_KEYS[trunk]['filters']}", f"seed={seed}"]
            config, preset = run.config.to_dict(), main.config.to_dict()
            assert {k: config["model"][k] for k in ("backbone", "filters")} == TRUNK_KEYS[trunk]
            assert without_trunk(config) == without_trunk(preset)  # optimizer, lr, memory, hidden_size, method
    assert by_key[("gcl-resnet18", 0)].config.model.hidden_size == 256  # GCL's own H
    assert by_key[("gcl-resnet18", 0)].config.train.optimizer == "adam"
    assert by_key[("derpp-convnet", 1)].config.train.learning_rate == 0.03  # DER++'s own SGD 0.03
    # Without the main study the runs on the presets' own trunks are still planned, once, as "<method>".
    runs = paper.plan(CIFAR, ["split_cifar10"], ["gcl,er"], 1, ["backbone"], backbones=["convnet"],
                      log=lambda text: None)
    assert [(r.variant, r.study) for r in runs] == [("gcl", "backbone"), ("er-convnet", "backbone")]


def test_default_studies_are_unchanged_and_plan_no_backbone_run(monkeypatch):
    """The backbone study is extra to the paper: the default --studies plan the runs they did."""
    from gcl_tf.benchmark import paper

    monkeypatch.chdir(REPO)
    assert paper.build_parser().parse_args(["--output", "x"]).studies == ["main,ablation,memory"]
    runs = paper.plan(benchmarks=["split_cifar10"], seeds=1, log=lambda text: None)
    assert not any(r.variant.endswith(("-convnet", "-resnet18")) for r in runs)
    assert {r.study for r in runs} == {"main", "ablation", "memory"}
    assert len(runs) == 8 + 2 + 6  # every preset; the ablation's 2 runs; ER and GCL at 100, 500, 1000


def test_backbone_study_on_a_benchmark_it_does_not_select_says_so():
    from gcl_tf.benchmark import paper

    notes = []
    runs = paper.plan(CIFAR, ["split_svhn"], ["er"], 1, ["backbone"], log=notes.append)
    assert runs == [] and len(notes) == 1
    assert "backbone study runs on split_cifar10" in notes[0] and "--backbone-benchmarks" in notes[0]
    runs = paper.plan(CIFAR, ["split_svhn"], ["er"], 1, ["backbone"], backbone_benchmarks=["all"],
                      log=notes.append)
    assert sorted(r.variant for r in runs) == ["er", "er-convnet"]


def test_backbone_trunks_are_the_backbones_defaults():
    """trunk_of reads ``filters: null`` as the table's filters: they must be the builders' defaults."""
    import inspect

    from gcl_tf import backbones
    from gcl_tf.benchmark import layout

    for name, (_, keys) in layout.BACKBONES.items():
        assert keys == TRUNK_KEYS[name]
        assert inspect.signature(getattr(backbones, name)).parameters["filters"].default == keys["filters"]
        assert layout.trunk_of({"backbone": name, "filters": None}) == name
        assert layout.trunk_of({"backbone": name, "filters": keys["filters"] + 1}) is None
    assert layout.trunk_of({"backbone": "mlp", "filters": None}) is None


def test_dry_run_lists_the_backbone_runs(monkeypatch, capsys):
    from gcl_tf.benchmark import paper

    forbid_training(monkeypatch)
    monkeypatch.chdir(REPO)
    assert paper.main(["--benchmarks", "split_cifar10", "--methods", "gcl,er", "--seeds", "2", "--studies",
                       "main,backbone", "--output", "/nonexistent/suite", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    listed = [line.split() for line in out if line.startswith("split_cifar10 ")]
    assert [(v, s, study) for _, v, _, s, study, *_ in listed] == [
        ("gcl", "0", "main"), ("gcl", "1", "main"), ("er", "0", "main"), ("er", "1", "main"),
        ("gcl-resnet18", "0", "backbone"), ("gcl-resnet18", "1", "backbone"),
        ("er-convnet", "0", "backbone"), ("er-convnet", "1", "backbone")]
    assert "8 runs: 0 finished, 8 to run" in out


def test_dry_run_columns_line_up_with_a_long_study_name(monkeypatch, capsys):
    from gcl_tf.benchmark import paper

    forbid_training(monkeypatch)
    monkeypatch.chdir(REPO)
    assert paper.main(["--benchmarks", "split_cifar10", "--methods", "gcl", "--seeds", "1", "--studies",
                       "main,graph_lambda", "--graph-lambdas", "0,5", "--output", "/nonexistent/suite",
                       "--dry-run"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("split_cifar10 ")]
    assert {line.split()[4] for line in listed} == {"main", "graph_lambda"}
    assert len({line.index("to run") for line in listed}) == 1, listed  # one column, whatever the study


def fake_backbone_suite(output, acc) -> None:
    """results.json files as the runs of ``paper --studies main,backbone`` write them (the planned
    configs), ACC and FGT from ``acc[(variant, seed)]`` (FGT = 100 - ACC), plus a main run outside
    the study (finetune) and a memory-study run, which the backbone table leaves out."""
    from gcl_tf.benchmark import layout, paper
    from gcl_tf.io import write_json_atomic

    runs = paper.plan(CIFAR, ["split_cifar10"], ["finetune,gcl,er"], 3, ["main,backbone,memory"],
                      memory_sizes=[100], log=lambda text: None)
    for run in runs:
        if run.method == "finetune" and run.variant != "finetune":
            continue
        value = acc.get((run.variant, run.seed), 20.0 + run.seed)
        if (run.variant, run.seed) not in acc and run.variant not in ("finetune", "er-memory100", "gcl-memory100"):
            continue  # a run not finished yet
        write_json_atomic(os.path.join(layout.run_dir(output, run.benchmark, run.variant, run.seed), "results.json"),
                          {"method": run.method, "seed": run.seed, "config": run.config.to_dict(), "acc": value,
                           "fgt": 100.0 - value, "bwt": -1.0, "accuracy_matrix": [[90.0, 0.0], [50.0, value]],
                           "train_seconds": 10.0, "eval_seconds": 1.0, "train_samples": 100, "eval_samples": 10})


def test_backbone_table_holds_each_method_on_each_trunk_from_main_runs_and_variants(tmp_path):
    """tables/backbone.md and .csv: methods x trunks, ACC and FGT mean ± std (n) per cell (numpy's
    over the seeds found), the presets' own trunks read from the main runs; `plots DIR` writes them."""
    from gcl_tf.benchmark import plots

    output = str(tmp_path / "suite")
    acc = {("gcl", 0): 50.0, ("gcl", 1): 47.5, ("gcl", 2): 47.25, ("gcl-resnet18", 0): 40.0,
           ("er", 0): 26.0, ("er", 1): 24.0, ("er", 2): 25.5, ("er-convnet", 0): 30.0, ("er-convnet", 1): 33.0}
    fake_backbone_suite(output, acc)
    assert plots.main([output]) == 0

    def stats(variant):
        values = np.array([v for (name, _), v in acc.items() if name == variant])
        return len(values), values.mean(), (values.std(ddof=1) if len(values) > 1 else float("nan"))

    rows = {(row["method"], row["backbone"]): row for row in read_csv(os.path.join(output, "tables", "backbone.csv"))}
    cells = {("gcl", "convnet"): "gcl", ("gcl", "resnet18"): "gcl-resnet18", ("er", "convnet"): "er-convnet",
             ("er", "resnet18"): "er"}
    assert set(rows) == set(cells)  # not finetune (no variant), not the memory run
    for key, variant in cells.items():
        n, mean, std = stats(variant)
        row = rows[key]
        assert row["benchmark"] == "split_cifar10" and row["variant"] == variant and int(row["seeds"]) == n
        assert float(row["acc_mean"]) == pytest.approx(mean, abs=1e-9)
        assert float(row["fgt_mean"]) == pytest.approx(100 - mean, abs=1e-9)
        assert (row["acc_std"] == "") if n == 1 else float(row["acc_std"]) == pytest.approx(std, abs=1e-9)
    # GCL's lead on each trunk, paired by seed: ConvNet seeds 0-1 (gcl - er-convnet), ResNet-18 seed 0 only
    convnet_diffs = np.array([acc[("gcl", s)] - acc[("er-convnet", s)] for s in (0, 1)])
    assert int(rows[("er", "convnet")]["gcl_lead_seeds"]) == 2
    assert float(rows[("er", "convnet")]["gcl_lead_mean"]) == pytest.approx(convnet_diffs.mean(), abs=1e-9)
    assert float(rows[("er", "convnet")]["gcl_lead_se"]) == pytest.approx(convnet_diffs.std(ddof=1) / np.sqrt(2))
    assert float(rows[("er", "resnet18")]["gcl_lead_mean"]) == pytest.approx(40.0 - 26.0)
    assert rows[("er", "resnet18")]["gcl_lead_se"] == "" and rows[("gcl", "convnet")]["gcl_lead_seeds"] == ""
    markdown = open(os.path.join(output, "tables", "backbone.md"), encoding="utf-8").read()
    assert ("| Method | ConvNet ACC (↑) | ConvNet FGT (↓) | ResNet-18 ACC (↑) | ResNet-18 FGT (↓) "
            "| GCL − method, ConvNet ACC (paired by seed) | GCL − method, ResNet-18 ACC (paired by seed) "
            "| Preset's trunk |") in markdown
    _, gcl_mean, gcl_std = stats("gcl")
    _, er_mean, er_std = stats("er")
    _, erc_mean, erc_std = stats("er-convnet")
    assert (f"| GCL | {gcl_mean:.2f} ± {gcl_std:.2f} (n=3) | {100 - gcl_mean:.2f} ± {gcl_std:.2f} (n=3) "
            f"| 40.00 (n=1) | 60.00 (n=1) |  |  | ConvNet |") in markdown
    assert (f"| ER | {erc_mean:.2f} ± {erc_std:.2f} (n=2) | {100 - erc_mean:.2f} ± {erc_std:.2f} (n=2) "
            f"| {er_mean:.2f} ± {er_std:.2f} (n=3) | {100 - er_mean:.2f} ± {er_std:.2f} (n=3) "
            f"| {convnet_diffs.mean():+.2f} ± {convnet_diffs.std(ddof=1) / np.sqrt(2):.2f} (s.e., 2 seeds) "
            "| +14.00 (1 seed) | ResNet-18 |") in markdown
    assert "tables/backbone.csv" in open(os.path.join(output, "README.md"), encoding="utf-8").read()


def test_backbone_table_compares_with_gcl_on_its_own_trunk_before_gcl_has_a_backbone_run(tmp_path):
    """GCL is every row's reference: with backbone runs of other methods only, its row holds its
    main runs on its preset's trunk (the ConvNet), and the methods run there get its lead; on the
    ResNet-18, where GCL has not run, '-'. Finetune (no backbone run) stays out."""
    from gcl_tf.benchmark import layout, study_tables

    output = str(tmp_path / "suite")
    fake_backbone_suite(output, {("gcl", 0): 50.0, ("gcl", 1): 48.0, ("er", 0): 25.0, ("er-convnet", 0): 38.0,
                                 ("er-convnet", 1): 41.0})
    markdown, _ = study_tables.backbone_table(layout.collect(output))
    assert "| GCL | 49.00 ± 1.41 (n=2) | 51.00 ± 1.41 (n=2) | - | - |  |  | ConvNet |" in markdown
    assert ("| ER | 39.50 ± 2.12 (n=2) | 60.50 ± 2.12 (n=2) | 25.00 (n=1) | 75.00 (n=1) "
            "| +9.50 ± 2.50 (s.e., 2 seeds) | - | ResNet-18 |") in markdown
    assert "Finetune" not in markdown


def test_no_backbone_table_without_a_backbone_variant(tmp_path):
    from gcl_tf.benchmark import layout, tables

    output = str(tmp_path / "suite")
    fake_backbone_suite(output, {("gcl", 0): 50.0, ("er", 0): 25.0})
    written = tables.write_tables(output, layout.collect(output))
    assert not any(os.path.basename(path).startswith("backbone") for path in written)


# ----------------------------------------------------------------------------- graph_lambda study
def test_graph_lambda_study_runs_gcl_at_each_value_sharing_the_main_and_ablation_runs():
    """GCL's preset with only method.graph_lambda changed, one folder per value; the preset's own
    value (50 on Split CIFAR10) is the main run and 0 the ablation's no-regularisation run (the
    same overrides, planned once whichever study asks first)."""
    from gcl_tf.benchmark import paper

    runs = paper.plan(CIFAR, ["split_cifar10"], ["gcl"], 2, ["main,ablation,graph_lambda"],
                      graph_lambdas=["0,5", "50,500"], log=lambda text: None)
    by_key = {(r.variant, r.seed): r for r in runs}
    assert len(by_key) == len(runs) == 10
    assert [(r.variant, r.study) for r in runs if r.seed == 0] == [
        ("gcl", "main"), ("gcl-no_graph_reg", "ablation"), ("gcl-no_graph_reg-one_sample-deterministic", "ablation"),
        ("gcl-graph_lambda5", "graph_lambda"), ("gcl-graph_lambda500", "graph_lambda")]
    for seed in range(2):
        preset = by_key[("gcl", seed)].config.to_dict()
        assert preset["method"]["graph_lambda"] == 50.0
        for variant, value in (("gcl-graph_lambda5", 5.0), ("gcl-graph_lambda500", 500.0)):
            run = by_key[(variant, seed)]
            assert run.overrides == ["method.name=gcl", f"method.graph_lambda={value!r}", f"seed={seed}"]
            config = run.config.to_dict()
            assert config["method"].pop("graph_lambda") == value
            preset_rest = json.loads(json.dumps(preset))
            preset_rest["method"].pop("graph_lambda")
            assert config == preset_rest  # nothing else changed
    # Alone, the study plans the main and no-regularisation runs itself, with the ablation's overrides.
    alone = paper.plan(CIFAR, ["split_cifar10"], ["gcl"], 1, ["graph_lambda"], graph_lambdas=["0,50,1000"],
                       log=lambda text: None)
    assert [(r.variant, r.study) for r in alone] == [("gcl-no_graph_reg", "graph_lambda"), ("gcl", "graph_lambda"),
                                                     ("gcl-graph_lambda1000", "graph_lambda")]  # in the values' order
    assert alone[0].overrides == by_key[("gcl-no_graph_reg", 0)].overrides
    # The default values are the appendix's grid; the study is not among the default studies.
    args = paper.build_parser().parse_args(["--output", "x"])
    assert args.graph_lambdas == ["0,10,50,100,1000"] and "graph_lambda" not in args.studies[0]


def fake_graph_lambda_suite(output, acc) -> None:
    """results.json files as ``paper --studies main,ablation,graph_lambda`` writes them (the planned
    configs), ACC from ``acc[(variant, seed)]`` (FGT = 100 - ACC / 2); runs not in ``acc`` are
    not finished. The ablation's deterministic run (graph_lambda 0 too) is always finished: the
    table must leave it out."""
    from gcl_tf.benchmark import layout, paper
    from gcl_tf.io import write_json_atomic

    runs = paper.plan(CIFAR, ["split_cifar10"], ["gcl"], 3, ["main,ablation,graph_lambda"],
                      graph_lambdas=["0,5,50,500"], log=lambda text: None)
    for run in runs:
        deterministic = run.variant.endswith("deterministic")
        if (run.variant, run.seed) not in acc and not deterministic:
            continue
        value = 5.0 if deterministic else acc[(run.variant, run.seed)]
        write_json_atomic(os.path.join(layout.run_dir(output, run.benchmark, run.variant, run.seed), "results.json"),
                          {"method": run.method, "seed": run.seed, "config": run.config.to_dict(), "acc": value,
                           "fgt": 100.0 - value / 2, "bwt": -1.0, "accuracy_matrix": [[90.0, 0.0], [50.0, value]],
                           "learning_accuracy": 80.0 + value / 10,
                           "train_seconds": 10.0, "eval_seconds": 1.0, "train_samples": 100, "eval_samples": 10})


def test_graph_lambda_table_and_figure_hold_every_value_with_its_paired_change(tmp_path):
    """tables/graph_lambda.md and .csv: one row per graph_lambda (0 from the ablation's run, the
    preset's from the main run, not the deterministic ablation run), ACC, FGT and learning accuracy
    mean ± std (n) as numpy computes them, and the change against the preset paired by seed (mean ± s.e. over the
    seeds both ran); the figure is drawn."""
    from gcl_tf.benchmark import plots

    output = str(tmp_path / "suite")
    acc = {("gcl", 0): 50.0, ("gcl", 1): 47.0, ("gcl", 2): 48.0,
           ("gcl-no_graph_reg", 0): 49.0, ("gcl-no_graph_reg", 1): 44.0, ("gcl-no_graph_reg", 2): 45.5,
           ("gcl-graph_lambda5", 0): 46.0, ("gcl-graph_lambda500", 0): 30.0, ("gcl-graph_lambda500", 2): 33.0}
    fake_graph_lambda_suite(output, acc)
    assert plots.main([output]) == 0
    rows = {float(row["graph_lambda"]): row for row in read_csv(os.path.join(output, "tables", "graph_lambda.csv"))}
    variants = {0.0: "gcl-no_graph_reg", 5.0: "gcl-graph_lambda5", 50.0: "gcl", 500.0: "gcl-graph_lambda500"}
    assert set(rows) == set(variants)
    for lam, variant in variants.items():
        seeds = sorted(seed for (name, seed) in acc if name == variant)
        values = np.array([acc[(variant, seed)] for seed in seeds])
        row = rows[lam]
        assert row["variant"] == variant and int(row["seeds"]) == len(values)
        assert float(row["acc_mean"]) == pytest.approx(values.mean(), abs=1e-9)
        assert float(row["fgt_mean"]) == pytest.approx(100 - values.mean() / 2, abs=1e-9)
        assert float(row["learning_accuracy_mean"]) == pytest.approx(80 + values.mean() / 10, abs=1e-9)
        if variant == "gcl":
            assert row["acc_change_mean"] == row["paired_seeds"] == ""
            continue
        diffs = values - np.array([acc[("gcl", seed)] for seed in seeds])
        assert int(row["paired_seeds"]) == len(diffs)
        assert float(row["acc_change_mean"]) == pytest.approx(diffs.mean(), abs=1e-9)
        assert float(row["fgt_change_mean"]) == pytest.approx(-diffs.mean() / 2, abs=1e-9)
        if len(diffs) > 1:
            assert float(row["acc_change_se"]) == pytest.approx(diffs.std(ddof=1) / np.sqrt(len(diffs)), abs=1e-9)
        else:
            assert row["acc_change_se"] == ""
    markdown = open(os.path.join(output, "tables", "graph_lambda.md"), encoding="utf-8").read()
    diffs = np.array([49.0 - 50.0, 44.0 - 47.0, 45.5 - 48.0])
    assert (f"| 0 | `gcl-no_graph_reg` | {np.mean([49.0, 44.0, 45.5]):.2f} ± {np.std([49.0, 44.0, 45.5], ddof=1):.2f} "
            f"(n=3) |") in markdown
    assert f"| {diffs.mean():+.2f} ± {diffs.std(ddof=1) / np.sqrt(3):.2f} (s.e., 3 seeds) |" in markdown
    assert "| 50 (preset) | `gcl` |" in markdown
    assert "| 5 | `gcl-graph_lambda5` | 46.00 (n=1) | 77.00 (n=1) | 84.60 (n=1) |" in markdown
    for path in glob.glob(os.path.join(output, "tables", "*.csv")):  # every table's rows fill its header
        with open(path, encoding="utf-8", newline="") as handle:
            header, *body = list(csv.reader(handle))
        assert body and all(len(row) == len(header) for row in body), path
    figure = os.path.join(output, "figures", "graph_lambda_split_cifar10.png")
    with open(figure, "rb") as handle:
        assert handle.read(8) == PNG_MAGIC
    index = open(os.path.join(output, "README.md"), encoding="utf-8").read()
    assert "tables/graph_lambda.csv" in index and "figures/graph_lambda_split_cifar10.png" in index


def test_no_graph_lambda_table_from_the_ablation_alone(tmp_path):
    """The main and no-regularisation runs alone (an ablation suite) make no graph_lambda table."""
    from gcl_tf.benchmark import layout, tables

    output = str(tmp_path / "suite")
    fake_graph_lambda_suite(output, {("gcl", 0): 50.0, ("gcl-no_graph_reg", 0): 45.0})
    written = tables.write_tables(output, layout.collect(output))
    assert not any(os.path.basename(path).startswith("graph_lambda") for path in written)
    assert any(os.path.basename(path) == "ablation.md" for path in written)


def test_memory_methods_run_one_half_of_the_memory_study(monkeypatch):
    """``--memory-methods er`` plans ER's memory runs only (issue 51: ER's minutes-long runs
    first); the main study's --methods does not touch the memory study (the paper's two by default);
    any other preset with a memory joins it (issue 49: today's baselines at 200 and 1000), one
    without a memory or without a preset is refused, naming those allowed."""
    from gcl_tf.benchmark import paper
    from gcl_tf.errors import UserError

    monkeypatch.chdir(REPO)
    runs = paper.plan(benchmarks=["split_cifar10"], studies=["memory"], seeds=1, memory_methods=["er"],
                      log=lambda text: None)
    assert {r.variant for r in runs} == {"er", "er-memory100", "er-memory500", "er-memory1000"}
    both = paper.plan(benchmarks=["split_cifar10"], methods=["finetune"], studies=["memory"], seeds=1,
                      log=lambda text: None)
    assert {r.method for r in both} == {"er", "gcl"}
    today = paper.plan(benchmarks=["split_cifar10_ocl"], memory_benchmarks=["split_cifar10_ocl"],
                       studies=["memory"], seeds=1, memory_methods=["mir,er_ace"], memory_sizes=["200,500"],
                       log=lambda text: None, method_keys=False)
    assert [(r.variant, r.stated.get("memory_size")) for r in today] == [
        ("er_ace-memory200", 200), ("er_ace", 500), ("mir-memory200", 200), ("mir", 500)]
    allowed = "allowed: gem, er, gcl, derpp, er_ace, mir"
    for name, why in (("finetune", "keeps no memory"), ("onpro", "has no preset there")):
        with pytest.raises(UserError, match=f"--memory-methods: '{name}' {why} .*; {allowed}$"):
            paper.plan(benchmarks=["split_cifar10"], studies=["memory"], seeds=1, memory_methods=[name],
                       log=lambda text: None, method_keys=False)


def test_the_suites_roles_are_data_naming_registered_methods(tmp_path):
    """Which method leads, which two the memory study compares, ...: gcl_tf/benchmark/paper_suite.yaml,
    whose names are checked against the registry when it is read (a misspelt one is refused)."""
    import yaml

    from gcl_tf import methods
    from gcl_tf.benchmark import roles

    data = roles.read()
    assert data["lead"] in methods.REGISTRY and roles.LEAD == data["lead"]
    variants = [variant for variant, _, _ in roles.ABLATIONS]
    assert variants[0] == roles.LEAD and all(v.startswith(roles.LEAD + "-") for v in variants[1:])
    for change, message in (({"memory_study": ["er", "gclx"]}, "'gclx' is not a registered method"),
                            ({"lead": "GCL"}, "'GCL' is not a registered method"),
                            ({"memory_study": ["er"]}, "memory_study names two methods")):
        path = tmp_path / "roles.yaml"
        path.write_text(yaml.safe_dump({**data, **change}))
        with pytest.raises(ValueError, match=message):
            roles.read(str(path))
