"""What the paper-suite tests share: a tiny suite's results, tables and figures read back, and
training forbidden where a test plans only."""
from __future__ import annotations

import csv
import glob
import json
import os

import pytest

from conftest import REPO
from tiny_suite import BENCHMARK

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


def one_line_error(capsys, call):
    with pytest.raises(SystemExit) as exit_info:
        call()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0]
    return err[0]


# ----------------------------------------------------------------------------- backbone study
CIFAR = os.path.join(REPO, "configs")


TRUNK_KEYS = {"convnet": {"backbone": "convnet", "filters": 64}, "resnet18": {"backbone": "resnet18", "filters": 20}}


def without_trunk(config: dict) -> dict:
    """A config dict without model.backbone and model.filters (the only keys a trunk replaces)."""
    config = json.loads(json.dumps(config))
    for key in ("backbone", "filters"):
        config["model"].pop(key)
    return config


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

