"""Shared test helpers (import as ``from helpers import ...``; pytest puts tests/ on sys.path)."""
from gcl_tf import config as config_lib

# A small permuted stream of scikit-learn's digits, for the baselines' learning checks.
DIGITS = {"name": "permuted", "dataset": "digits", "source": "digits", "num_tasks": 3, "samples_per_task": 300}


def digits_config(method: dict, benchmark=None, **model):
    """A validated config: ``method`` section on the ``DIGITS`` stream (``benchmark`` overrides
    its keys), a 64-unit MLP (``model`` overrides), SGD 0.1, batch 10."""
    return config_lib.resolve({
        "seed": 0,
        "benchmark": {**DIGITS, **(benchmark or {})},
        "method": method,
        "model": {"backbone": "mlp", "hidden_size": 64, **model},
        "train": {"batch_size": 10, "learning_rate": 0.1},
        "eval": {"batch_size": 450},
    })
