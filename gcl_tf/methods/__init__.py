"""Continual-learning methods: one module each, registered by name in :data:`REGISTRY`.

A method is its module plus one line here: ``"key": ("module", "ClassName")``, placed where its
row goes in the benchmark's tables and figures. The module defines ``Config`` (a dataclass
subclassing :class:`gcl_tf.schema.MethodConfig`: the method's keys, each with its type, range,
default and comment, written once) and the class, a :class:`gcl_tf.methods.base.ContinualModel`
whose constructor takes those keys as ``**keys`` (gcl_tf/methods/keys.py gives it the signature
that lists them). Everything else is read from the class: the public name
``gcl_tf.<ClassName>``, its label in tables, the tuner's default space, distribution and precision
support and the memory estimate (docs/api.md, "Adding a method"). Modules are imported on first
use; this file imports nothing heavy (``import gcl_tf`` reads the registry without TensorFlow), and
a method's keys are read without importing its module (:func:`read_config`).
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect

from gcl_tf.data.config import IN_STEP_AUGMENTATIONS
from gcl_tf.methods import keys

REGISTRY = {  # in the order of the tables' rows (the paper's; GCL, the paper's method, last)
    "finetune": ("gcl_tf.methods.finetune", "Finetune"),
    "ewc": ("gcl_tf.methods.ewc", "EWC"),
    "icarl": ("gcl_tf.methods.icarl", "ICaRL"),
    "gem": ("gcl_tf.methods.gem", "GEM"),
    "agem": ("gcl_tf.methods.agem", "AGEM"),
    "er": ("gcl_tf.methods.er", "ER"),
    "mer": ("gcl_tf.methods.mer", "MER"),
    "derpp": ("gcl_tf.methods.derpp", "DERPP"),
    "er_ace": ("gcl_tf.methods.er_ace", "ERACE"),
    "mir": ("gcl_tf.methods.mir", "MIR"),
    "onpro": ("gcl_tf.methods.onpro", "OnPro"),
    "gcl": ("gcl_tf.methods.gcl", "GCL"),
}
DEFAULT = "gcl"  # the paper's method: what a config without method.name runs


def names() -> list[str]:
    """Names of the methods whose module is present."""
    return [name for name, (module, _) in REGISTRY.items() if importlib.util.find_spec(module) is not None]


def exports() -> dict:
    """``{public class name: (module, class name)}``: the ``gcl_tf.<Name>`` of every method."""
    return {cls: (module, cls) for module, cls in REGISTRY.values()}


def registered_as(cls) -> str | None:
    """The registry key of ``cls`` itself (defined in its registry module or a module of that
    package), else None."""
    for name, (module, class_name) in REGISTRY.items():
        if cls.__name__ == class_name and (cls.__module__ == module or cls.__module__.startswith(module + ".")):
            return name
    return None


def registry_name(cls) -> str | None:
    """The registry key of a method class, or of the nearest registered class it derives from;
    None for a class outside the registry."""
    return next((key for key in map(registered_as, cls.__mro__) if key is not None), None)


def module(name: str):
    return importlib.import_module(REGISTRY[name][0])


def config_class(name: str):
    """The method's ``Config``, from its module (imported: TensorFlow loads)."""
    return module(name).Config


def read_config(name: str):
    """The method's ``Config`` without importing its module where it can be read so
    (:func:`gcl_tf.methods.keys.read_config`), else from the imported module."""
    return keys.read_config(REGISTRY[name][0]) or config_class(name)


def method_class(name: str):
    return getattr(module(name), REGISTRY[name][1])


def distributed_names() -> list[str]:
    """Names of the methods that run under a tf.distribute strategy (``supports_distribution``)."""
    return [name for name in names() if method_class(name).supports_distribution]


def augmenting_names() -> list[str]:
    """Names of the methods that take an in-step augmentation (``augments_in_step``)."""
    return [name for name in names() if method_class(name).augments_in_step]


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
        "augment": b.augment if b.augment in IN_STEP_AUGMENTATIONS else "none",  # flip: the stream's own
    }
    accepted = inspect.signature(method_class(config.method.name)).parameters
    return {key: value for key, value in run.items() if key in accepted}


def build(config, input_shape, num_classes: int):
    """The method a run's config describes: its ``method`` keys as keywords, the backbone from
    ``model``, and from the other sections what the method's constructor takes
    (:func:`run_arguments`); its layers under the configured Keras dtype policy
    (``train.mixed_precision``, checked first: gcl_tf/precision.py)."""
    from gcl_tf import precision
    from gcl_tf.backbones import build_backbone, torch_default_init

    policy = config.train.mixed_precision
    cls = method_class(config.method.name)
    precision.check(config.method.name, policy, loss_scaling=cls.supports_loss_scaling)
    values = {f.name: getattr(config.method, f.name) for f in keys.key_fields(type(config.method))}
    with precision.policy_scope(policy):
        method = cls(**values, backbone=build_backbone(config.model, input_shape),
                     **run_arguments(config, input_shape, num_classes))
    if config.model.initializer == "torch":
        torch_default_init(method)
    return method
