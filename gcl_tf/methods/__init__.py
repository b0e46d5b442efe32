"""Continual-learning methods: one module each, registered by name in :data:`REGISTRY`.

A method is its module plus one line here: ``"key": ("module", "ClassName")``. The module defines
``Config`` (a dataclass subclassing :class:`gcl_tf.schema.MethodConfig` with the method's keys,
their ranges and defaults) and the class, a :class:`gcl_tf.methods.base.ContinualModel` whose
constructor takes those keys as keywords. Everything else is read from the class: the public
name ``gcl_tf.<ClassName>``, the tuner's default space, distribution and precision support and
the memory estimate (docs/api.md, "Adding a method"). Modules are imported on first use; this
file imports nothing heavy (``import gcl_tf`` reads the registry without TensorFlow).
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect

REGISTRY = {
    "finetune": ("gcl_tf.methods.finetune", "Finetune"),
    "er": ("gcl_tf.methods.er", "ER"),
    "gcl": ("gcl_tf.methods.gcl", "GCL"),
    "ewc": ("gcl_tf.methods.ewc", "EWC"),
    "gem": ("gcl_tf.methods.gem", "GEM"),
    "agem": ("gcl_tf.methods.agem", "AGEM"),
    "mer": ("gcl_tf.methods.mer", "MER"),
    "icarl": ("gcl_tf.methods.icarl", "ICaRL"),
    "derpp": ("gcl_tf.methods.derpp", "DERPP"),
    "er_ace": ("gcl_tf.methods.er_ace", "ERACE"),
}


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
    return module(name).Config


def method_class(name: str):
    return getattr(module(name), REGISTRY[name][1])


def distributed_names() -> list[str]:
    """Names of the methods that run under a tf.distribute strategy (``supports_distribution``)."""
    return [name for name in names() if method_class(name).supports_distribution]


def accepted_keywords(cls) -> set:
    """The keywords ``cls``'s constructor takes: its own and, when it passes ``**common`` on,
    those of :class:`gcl_tf.methods.base.ContinualModel`."""
    from gcl_tf.methods.base import ContinualModel

    parameters = inspect.signature(cls.__init__).parameters
    accepted = set(parameters)
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        accepted |= set(inspect.signature(ContinualModel.__init__).parameters)
    return accepted


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
    accepted = accepted_keywords(method_class(config.method.name))
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
    keys = {f.name: getattr(config.method, f.name) for f in dataclasses.fields(config.method) if f.name != "name"}
    with precision.policy_scope(policy):
        method = cls(**keys, backbone=build_backbone(config.model, input_shape),
                     **run_arguments(config, input_shape, num_classes))
    if config.model.initializer == "torch":
        torch_default_init(method)
    return method
