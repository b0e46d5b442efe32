"""Where a suite keeps its runs, tables and figures, and how its saved results are read back.

    DIR/runs/<benchmark>/<method-or-variant>/seed<k>/results.json   (+ artifacts.npz, tensorboard/)
    DIR/tables/*.md, *.csv
    DIR/figures/*.png
    DIR/README.md        index of the tables and figures, with the commands that made them
    DIR/suite.json       the `paper` invocations that wrote into DIR

``<benchmark>`` is the stem of the benchmark's config file (configs/<benchmark>.yaml).
``<method-or-variant>`` is a method name for the main runs (the config's preset) or
``<method>-<variant>`` for the studies (e.g. ``er-memory100``, ``er-convnet``, the ablation's
variants of the lead method, gcl_tf/benchmark/paper_suite.yaml).
"""
from __future__ import annotations

import glob
import json
import math
import os
import re
from dataclasses import dataclass

import numpy as np

from gcl_tf import methods
from gcl_tf.benchmark.roles import ABLATIONS, DERIVED, lead_variant
from gcl_tf.errors import UserError
from gcl_tf.io import read_json
from gcl_tf.run_layout import ARTIFACTS, RESULTS  # as written by gcl_tf.train

RUNS, TABLES, FIGURES = "runs", "tables", "figures"
SUITE = "suite.json"

BENCHMARK_LABELS = {
    "permuted_mnist": "Permuted MNIST",
    "rotated_mnist": "Rotated MNIST",
    "split_svhn": "Split SVHN",
    "split_cifar10": "Split CIFAR10",
    "split_cifar10_ocl": "Split CIFAR10 (today's protocol)",
    "split_cifar100": "Split CIFAR100",
    "split_miniimagenet": "Split MiniImageNet",
    "permuted_fashion_mnist": "Permuted Fashion-MNIST",
    "rotated_fashion_mnist": "Rotated Fashion-MNIST",
    "split_fashion_mnist": "Split Fashion-MNIST",
    "quickstart": "Permuted digits",
}


# The ablation's variants of the lead method (gcl_tf/benchmark/roles.py: the suite's roles).
ABLATION_VARIANTS = tuple(name for name, _, _ in ABLATIONS)
# The graph_lambda study (the paper's figure of λ_G): the lead method at each method.graph_lambda.
# The appendix's grid of the RGB benchmarks (5000 is Rotated MNIST's); the paper's text calls 1000 extreme.
PAPER_GRAPH_LAMBDAS = (0.0, 10.0, 50.0, 100.0, 1000.0)


def graph_lambda_variant(value: float) -> str:
    """The folder of the lead method at graph_lambda ``value`` (``<lead>-graph_lambda500``); 0 is
    the ablation's no-regularisation run and the preset's own value the main run (``studies.graph_lambda``)."""
    return lead_variant(f"graph_lambda{float(value):g}")


def memory_variant(method: str, size: int) -> str:
    return f"{method}-memory{size}"


# The trunks of the backbone study (--backbones): {name: (label, the model keys that make it)}.
# A backbone variant is the method's preset with these keys replaced and nothing else (the rule:
# gcl_tf/benchmark/studies.py). model.hidden_size is not a trunk's: the ConvNet and the ResNet-18
# ignore it (it sizes the MLP trunk's layers); GCL reads it as H, the width of its edge, latent and
# label embeddings on any trunk, so each method keeps its own.
BACKBONES = {
    "convnet": ("ConvNet", {"backbone": "convnet", "filters": 64}),  # the authors' (GCL's preset)
    "resnet18": ("ResNet-18", {"backbone": "resnet18", "filters": 20}),  # GEM's reduced one (the baselines')
}


def backbone_variant(method: str, trunk: str) -> str:
    return f"{method}-{trunk}"


def backbone_overrides(trunk: str) -> list[str]:
    """The ``--set`` overrides that put ``trunk`` (a BACKBONES name) in a run's config."""
    return [f"model.{key}={value}" for key, value in BACKBONES[trunk][1].items()]


def trunk_of(model: dict):
    """The BACKBONES name of the trunk a config's ``model`` section (a dict) describes, or None.
    ``filters: null`` is the backbone's default, which is the table's (64 and 20, the paper's)."""
    for name, (_, keys) in BACKBONES.items():
        if model.get("backbone") == keys["backbone"] and model.get("filters") in (None, keys["filters"]):
            return name
    return None


def method_label(method: str) -> str:
    """The method's name in tables and figures: its class's ``label``, else the class name (a
    name outside the registry as it is)."""
    if method not in methods.REGISTRY:
        return method
    cls = methods.method_class(method)
    return cls.label or cls.__name__


def benchmark_label(benchmark: str) -> str:
    return BENCHMARK_LABELS.get(benchmark, benchmark.replace("_", " "))


def run_dir(output: str, benchmark: str, variant: str, seed: int) -> str:
    return os.path.join(output, RUNS, benchmark, variant, f"seed{seed}")


@dataclass
class RunResult:
    """One finished run, read from its results.json."""

    benchmark: str
    variant: str
    seed: int
    folder: str
    results: dict

    @property
    def method(self) -> str:
        return self.results.get("method") or self.variant.split("-")[0]

    @property
    def is_main(self) -> bool:
        """A main run: the config's preset for the method, no study variant."""
        return "-" not in self.variant

    @property
    def config(self) -> dict:
        return self.results.get("config", {})

    @property
    def memory_size(self):
        return self.config.get("method", {}).get("memory_size")

    def artifacts(self):
        """The arrays saved at the end of training (a dict), or None when the run has none."""
        path = os.path.join(self.folder, ARTIFACTS)
        if not os.path.isfile(path):
            return None
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}

    # Per-sample times (milliseconds) from the saved seconds and counts.
    def train_ms_per_sample(self) -> float:
        r = self.results
        samples = r.get("train_samples")
        if samples is None and r.get("train_steps") is not None:  # results written before the count
            samples = r["train_steps"] * self.config.get("train", {}).get("batch_size", 1)
        return 1000.0 * r["train_seconds"] / samples if samples else float("nan")

    def test_ms_per_sample(self) -> float:
        samples = self.results.get("eval_samples")
        return 1000.0 * self.results["eval_seconds"] / samples if samples else float("nan")


_SEED = re.compile(r"^seed(\d+)$")


def collect(output: str) -> list[RunResult]:
    """Every finished run under ``output/runs`` (those with a results.json), in a stable order."""
    if not os.path.isdir(output):
        raise UserError(f"results folder {output!r} does not exist")
    found = []
    for path in sorted(glob.glob(os.path.join(output, RUNS, "*", "*", "seed*", RESULTS))):
        seed_dir = os.path.dirname(path)
        variant_dir = os.path.dirname(seed_dir)
        match = _SEED.match(os.path.basename(seed_dir))
        if not match:
            continue
        try:
            results = read_json(path)
        except (OSError, ValueError) as error:
            raise UserError(f"{path}: not a readable results file ({error.__class__.__name__})") from None
        found.append(RunResult(os.path.basename(os.path.dirname(variant_dir)), os.path.basename(variant_dir),
                               int(match.group(1)), seed_dir, results))
    found += derived_runs(found)
    found.sort(key=lambda r: (r.benchmark, r.variant, r.seed))
    return found


def derived_runs(found) -> list[RunResult]:
    """The DERIVED variants of the runs ``found`` whose results hold the evaluation they are read
    from, unless a folder of their own was trained (suites before the evaluations existed): the
    evaluation's accuracy matrix and metrics, the config with its settings applied."""
    trained = {(r.benchmark, r.variant, r.seed) for r in found}
    out = []
    for variant, (source, evaluation) in DERIVED.items():
        for run in found:
            measured = run.results.get("evaluations", {}).get(evaluation)
            if run.variant != source or measured is None or (run.benchmark, variant, run.seed) in trained:
                continue
            config = json.loads(json.dumps(run.config))
            config.setdefault("method", {}).update(measured.get("settings", {}))
            results = {**run.results, **{k: v for k, v in measured.items() if k != "settings"},
                       "config": config, "derived_from": f"{source}/seed{run.seed} (evaluation {evaluation})"}
            results.pop("evaluations", None)
            out.append(RunResult(run.benchmark, variant, run.seed, run.folder, results))
    return out


def method_sort_key(method: str):
    """Rows in the registry's order (gcl_tf/methods/__init__.py); names outside it last."""
    order = list(methods.REGISTRY)
    return (order.index(method) if method in order else len(order), method)


def mean_std(values) -> tuple[float, float, int]:
    """Mean, sample standard deviation (ddof=1; NaN for one value) and count of the finite values."""
    values = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    n = len(values)
    if n == 0:
        return float("nan"), float("nan"), 0
    return float(np.mean(values)), (float(np.std(values, ddof=1)) if n > 1 else float("nan")), n


def paired_difference(pairs) -> tuple[float, float, int]:
    """Mean of paired differences ``b - a`` over ``pairs`` [(a, b), ...] (one per seed), its standard
    error (std ddof=1 / sqrt(n); NaN for one pair) and the count of pairs with both values finite."""
    diffs = [b - a for a, b in pairs if a is not None and b is not None and np.isfinite(a) and np.isfinite(b)]
    mean, std, n = mean_std(diffs)
    return mean, (std / math.sqrt(n) if n > 1 else float("nan")), n


def seen_task_accuracy(matrix) -> np.ndarray:
    """[T]: after task i, the accuracy averaged over tasks 1..i (the paper's accuracy-vs-tasks curve)."""
    R = np.asarray(matrix, dtype=float)
    return np.array([R[i, : i + 1].mean() for i in range(R.shape[0])])
