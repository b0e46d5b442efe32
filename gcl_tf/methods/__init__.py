"""Continual-learning methods: one module each, registered by name in :data:`REGISTRY`.

A method is its module plus one line here: ``"key": ("module", "ClassName")``, placed where its
row goes in the benchmark's tables and figures. The module defines
``Config`` (a dataclass subclassing :class:`gcl_tf.schema.MethodConfig` with the method's keys,
their ranges and defaults) and the class, a :class:`gcl_tf.methods.base.ContinualModel` whose
constructor takes those keys as keywords. Everything else is read from the class: the public
name ``gcl_tf.<ClassName>``, its label in tables, the tuner's default space, distribution and precision support and
the memory estimate (docs/api.md, "Adding a method"). Modules are imported on first use; this
file imports nothing heavy (``import gcl_tf`` reads the registry without TensorFlow).
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import sys

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


def settings_class(cls):
    """A method class's ``Config``: for the nearest class in its ancestry (itself first) that is
    registered, its registry module's (what the CLI builds), or that defines one in its own
    module, that ``Config`` (a subclass without one keeps its parent's); None when none has."""
    from gcl_tf.schema import MethodConfig

    for klass in cls.__mro__:
        key = registered_as(klass)
        module = sys.modules.get(REGISTRY[key][0] if key is not None else klass.__module__)
        config = getattr(module, "Config", None)
        if isinstance(config, type) and issubclass(config, MethodConfig) and dataclasses.is_dataclass(config):
            return config
    return None


def check_declaration(cls) -> None:
    """The rules a method class follows, checked when it is defined (a TypeError names the
    rule): each key of its ``Config`` but ``name`` is a keyword of its constructor with the same
    default (the CLI and the API build the same method); a ``name`` keyword, if declared,
    defaults to None or the registry key."""
    parameters = inspect.signature(cls.__init__).parameters
    key = registry_name(cls)
    declared = parameters.get("name")
    if declared is not None and key is not None and declared.default not in (None, key):
        raise TypeError(f"{cls.__name__}: the keyword name defaults to {declared.default!r}; allowed: None or "
                        f"the registry key {key!r}")
    config = settings_class(cls)
    for f in dataclasses.fields(config) if config is not None else ():
        if f.name == "name":
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        parameter = parameters.get(f.name)
        if parameter is None or parameter.default != default:
            raise TypeError(f"{cls.__name__}: its constructor must take the keyword {f.name}={default!r}, the key "
                            f"and default of {config.__module__}.Config")


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
        "augment": b.augment if b.augment in ("none", "ocl") else "none",  # flip: the stream's own
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
