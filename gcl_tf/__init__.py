"""gcl_tf: Graph-Based Continual Learning (Tang & Matteson, ICLR 2021) and its baselines in TensorFlow/Keras.

The Python API (docs/api.md), imported on first use so that ``import gcl_tf`` stays light:

- the methods, Keras models, one per entry of the registry (gcl_tf/methods/__init__.py): ``GCL``,
  ``ER``, ``EWC``, ... (``model.compile(optimizer=...)``, then ``model.fit(task_stream)`` per task);
- ``gcl_tf.data.load(name, source=..., path=...)`` and ``gcl_tf.benchmarks.permuted/rotated/split``:
  continual streams of tasks with ``.train`` and ``.test`` tf.data datasets;
- ``gcl_tf.callbacks.TaskBoundary``: a task's boundaries for ``fit``;
- ``gcl_tf.run(config_or_path, **overrides) -> Results``: a whole run from a config, as the CLI;
- ``gcl_tf.load_model(path)``: a learner saved whole (``model.save("learner.keras")`` or a run's
  ``DIR/learner.keras``), memory included, ready to go on learning.
"""
import importlib

from gcl_tf import methods as _methods  # the registry only: no TensorFlow

__version__ = "0.1.0"

_EXPORTS = {
    **_methods.exports(),  # GCL, ER, ...: one per registry entry
    "run": ("gcl_tf.api", "run"),
    "Results": ("gcl_tf.api", "Results"),
    "load_model": ("gcl_tf.api", "load_model"),
}
_SUBMODULES = {"api": "gcl_tf.api", "benchmarks": "gcl_tf.data.benchmarks", "callbacks": "gcl_tf.callbacks",
               "config": "gcl_tf.config", "data": "gcl_tf.data", "methods": "gcl_tf.methods", "saving": "gcl_tf.saving"}

__all__ = sorted(_EXPORTS) + list(_SUBMODULES)


def __getattr__(name):
    if name in _EXPORTS:
        module, attribute = _EXPORTS[name]
        value = getattr(importlib.import_module(module), attribute)
    elif name in _SUBMODULES:
        value = importlib.import_module(_SUBMODULES[name])
    else:
        raise AttributeError(f"module 'gcl_tf' has no attribute {name!r}")
    globals()[name] = value
    return value


# Keras finds the learners' classes as soon as it is imported; TensorFlow imports quietly.
from gcl_tf import import_hooks as _import_hooks  # noqa: E402

_import_hooks.install()
