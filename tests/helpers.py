"""Shared test helpers (import as ``from helpers import ...``; pytest puts tests/ on sys.path)."""
import importlib.util
import os
import re

from gcl_tf import config as config_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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


# TensorFlow's start-up lines on stderr: absl's "I0000 00:00:... port.cc:153] oneDNN ...", its notice
# about InitializeLog, the CUDA probe ("E0000 ... cuda_platform.cc:52] failed call to cuInit"), the
# CPU-feature notice.
TF_STARTUP_LOG = re.compile(r"^[IWE]\d{4} [\d:.]+\s+\d+ \S+:\d+\]|absl::InitializeLog|cpu_feature_guard|"
                            r"rebuild TensorFlow|cuInit", re.MULTILINE)


def without_tf_log_level() -> dict:
    """The environment of a subprocess as a user's shell has it: no TF_CPP_MIN_LOG_LEVEL."""
    import os

    return {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}


def quickstart_twice(method: str, output_dir) -> tuple:
    """configs/quickstart.yaml with ``method``'s preset, run twice (under ``output_dir``): the
    second run must repeat the first's accuracy matrix. Returns (config, results)."""
    import os

    import numpy as np

    from gcl_tf.train import run

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "quickstart.yaml")
    config = config_lib.load_config(path, [f"method.name={method}", "train.verbose=0"])
    first = run(config, output_dir=os.path.join(str(output_dir), "a"), verbose=0)
    again = run(config, output_dir=os.path.join(str(output_dir), "b"), verbose=0)
    np.testing.assert_array_equal(first["accuracy_matrix"], again["accuracy_matrix"])
    return config, first


def linear_backbone(image_shape):
    """A backbone that only flattens: the classifier on it is linear, logits = flatten(x) @ W + b."""
    import keras

    return keras.Sequential([keras.Input(tuple(image_shape)), keras.layers.Flatten()])


def output_weights(model):
    """``(W, b)`` of the method's last linear layer (``logits``), as float64 arrays."""
    import numpy as np

    kernel, bias = model.network.get_layer("logits").weights
    return kernel.numpy().astype(np.float64), bias.numpy().astype(np.float64)


def load_script(*parts: str):
    """The module of a script the repository ships outside the package (``parts``: its path from
    the repository's root, e.g. ``"docs", "results", "search", "tuned_configs.py"``)."""
    path = os.path.join(REPO, *parts)
    spec = importlib.util.spec_from_file_location(os.path.splitext(parts[-1])[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dynamic_imports(tree) -> list:
    """``[(module, line)]`` that ``tree`` imports by name at run time: ``importlib.import_module``
    (or ``import_module``) of a string, or of an f-string whose literal start names a package
    (``f"gcl_tf.data.{name}"``: ``gcl_tf.data``). A name computed otherwise is not seen."""
    import ast

    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args and getattr(node.func, "attr", getattr(node.func, "id", None))
                == "import_module"):
            continue
        target = node.args[0]
        if isinstance(target, ast.Constant) and isinstance(target.value, str):
            found.append((target.value, node.lineno))
        elif isinstance(target, ast.JoinedStr) and target.values and isinstance(target.values[0], ast.Constant):
            found.append((str(target.values[0].value).rpartition(".")[0], node.lineno))
    return found
