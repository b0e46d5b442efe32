"""Continual-learning methods: one module each, registered by name.

Each module defines ``Config`` (a dataclass subclassing :class:`gcl_tf.schema.MethodConfig`
with the method's keys, their ranges and the paper's defaults) and ``Method``, its
:class:`gcl_tf.methods.base.ContinualModel` (also under its own name: ``GCL``, ``ER``, ...),
whose constructor takes those keys as keywords. Modules are imported on first use.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect

_MODULES = {
    "finetune": "gcl_tf.methods.finetune",
    "er": "gcl_tf.methods.er",
    "gcl": "gcl_tf.methods.gcl",
    "ewc": "gcl_tf.methods.ewc",
    "gem": "gcl_tf.methods.gem",
    "agem": "gcl_tf.methods.agem",
    "mer": "gcl_tf.methods.mer",
    "icarl": "gcl_tf.methods.icarl",
}


def names() -> list[str]:
    """Names of the methods whose module is present."""
    return [name for name, module in _MODULES.items() if importlib.util.find_spec(module) is not None]


def module(name: str):
    return importlib.import_module(_MODULES[name])


def config_class(name: str):
    return module(name).Config


def method_class(name: str):
    return module(name).Method


def run_arguments(config, input_shape, num_classes: int) -> dict:
    """What the method's constructor takes from a run's config besides its ``method`` keys and
    the backbone: the seed, the batch sizes, the stream's classes and tasks (only the keywords
    the constructor accepts)."""
    b = config.benchmark
    run = {
        "input_shape": tuple(int(d) for d in input_shape),
        "num_classes": int(num_classes),
        "name": config.method.name,
        "seed": config.seed,
        "batch_size": config.train.batch_size,
        "eval_batch_size": config.eval.batch_size,
        "hidden_size": config.model.hidden_size,
        "num_tasks": b.num_tasks,
        "classes_per_task": b.classes_per_task if b.name == "split" else None,
        "multi_head": b.multi_head,
    }
    accepted = inspect.signature(method_class(config.method.name).__init__).parameters
    return {key: value for key, value in run.items() if key in accepted}


def build(config, input_shape, num_classes: int):
    """The method a run's config describes: its ``method`` keys as keywords, the backbone from
    ``model``, and from the other sections what the method's constructor takes
    (:func:`run_arguments`); its layers under the configured Keras dtype policy
    (``train.mixed_precision``, checked first: gcl_tf/precision.py)."""
    from gcl_tf import precision
    from gcl_tf.backbones import build_backbone

    policy = config.train.mixed_precision
    precision.check(config.method.name, policy)
    cls = method_class(config.method.name)
    keys = {f.name: getattr(config.method, f.name) for f in dataclasses.fields(config.method) if f.name != "name"}
    with precision.policy_scope(policy):
        return cls(**keys, backbone=build_backbone(config.model, input_shape),
                   **run_arguments(config, input_shape, num_classes))
