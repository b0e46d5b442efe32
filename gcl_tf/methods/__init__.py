"""Continual-learning methods: one file each, registered by name.

Each module defines ``Config`` (a dataclass subclassing :class:`gcl_tf.config.MethodConfig`
with the method's keys and the paper's defaults) and ``Method`` (a
:class:`gcl_tf.methods.base.ContinualModel`). Modules are imported on first use.
"""
from __future__ import annotations

import importlib
import importlib.util

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
