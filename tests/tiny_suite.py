"""A tiny `python -m gcl_tf.benchmark paper` suite on the bundled digits, built once per test
process and shared by tests/test_benchmark.py and tests/test_notebooks.py (read-only: a test
that changes it works on a copy, see ``copy_suite``).

2 methods (finetune, gcl) x 2 seeds x 2 tasks, the ablation study (3 more GCL variants) and the
memory study (ER and GCL at memory 20 and 40; 40 is the presets' size, so those are the main
runs): 16 runs of a few seconds each.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

TINY_CONFIG = """\
# A tiny benchmark for the tests: 2 permuted tasks of 60 digits, 100 test digits per task.
seed: 0
benchmark: {name: permuted, dataset: digits, source: digits, num_tasks: 2, samples_per_task: 60,
            test_samples_per_task: 100}
method: {name: gcl}
model: {backbone: mlp, hidden_size: 32}
train: {batch_size: 10, verbose: 0, log_every: 0}
eval: {batch_size: 100}
presets:
  finetune: {train: {optimizer: sgd, learning_rate: 0.1}}
  er: {method: {memory_size: 40}, train: {optimizer: sgd, learning_rate: 0.1}}
  gcl:
    # the paper's head and loss, as the shipped configs' GCL presets name them
    method: {memory_size: 40, test_graph_samples: 5, context_temperature: 0.1, own_latent: false, target_loss: all}
    train: {optimizer: adam, learning_rate: 0.003}
"""
BENCHMARK = "tiny_digits"
METHODS = ("finetune", "gcl")
SEEDS = 2
MEMORY_SIZES = (20, 40)
# (variant folder, method) of every run the suite makes, for each seed (the ablation's one-sample
# column is the gcl-no_graph_reg run's second evaluation, not a run).
VARIANTS = (
    ("finetune", "finetune"), ("gcl", "gcl"),
    ("gcl-no_graph_reg", "gcl"), ("gcl-no_graph_reg-one_sample-deterministic", "gcl"),
    ("er", "er"), ("er-memory20", "er"), ("gcl-memory20", "gcl"),
)

_BUILT: dict = {}


def write_configs(folder: str) -> str:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, BENCHMARK + ".yaml"), "w", encoding="utf-8") as handle:
        handle.write(TINY_CONFIG)
    return folder


def suite_args(config_dir: str, output: str) -> list[str]:
    return ["--config-dir", config_dir, "--benchmarks", BENCHMARK, "--methods", ",".join(METHODS),
            "--seeds", str(SEEDS), "--studies", "main,ablation,memory", "--ablation-benchmarks", "all",
            "--memory-benchmarks", "all", "--memory-sizes", ",".join(map(str, MEMORY_SIZES)),
            "--output", output]


def build() -> tuple[str, str]:
    """(config_dir, output) of the suite, run on first use in this process."""
    if "output" not in _BUILT:
        from gcl_tf.benchmark import paper

        root = tempfile.mkdtemp(prefix="gcl-tiny-suite-")
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        config_dir = write_configs(os.path.join(root, "configs"))
        output = os.path.join(root, "suite")
        assert paper.main(suite_args(config_dir, output)) == 0
        _BUILT.update(config_dir=config_dir, output=output)
    return _BUILT["config_dir"], _BUILT["output"]


def copy_suite(destination) -> tuple[str, str]:
    """A private copy of the built suite: (config_dir, output)."""
    config_dir, output = build()
    copy = os.path.join(str(destination), "suite")
    shutil.copytree(output, copy)
    return config_dir, copy
