"""The studies' tables and runs: the backbone table, the graph_lambda study, the memory study's methods
and the suite's roles."""
from __future__ import annotations

import csv
import glob
import json
import os

import numpy as np
import pytest
from benchmark_harness import CIFAR, PNG_MAGIC, fake_backbone_suite, fake_graph_lambda_suite, read_csv

from conftest import REPO


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
                       log=lambda text: None)
    assert [(r.variant, r.config.method.memory_size) for r in today] == [
        ("er_ace-memory200", 200), ("er_ace", 500), ("mir-memory200", 200), ("mir", 500)]
    allowed = "allowed: gem, er, gcl, derpp, er_ace, mir"
    for name, why in (("finetune", "keeps no memory"), ("onpro", "has no preset there")):
        with pytest.raises(UserError, match=f"--memory-methods: '{name}' {why} .*; {allowed}$"):
            paper.plan(benchmarks=["split_cifar10"], studies=["memory"], seeds=1, memory_methods=[name],
                       log=lambda text: None)


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

