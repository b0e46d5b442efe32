"""Continual-learning methods: one module each, registered by name in :data:`REGISTRY`.

A method is its module plus one line here: ``"key": ("module", "ClassName", Config)``, placed
where its row goes in the benchmark's tables and figures. ``Config`` is the method's keys, a
dataclass subclassing :class:`gcl_tf.schema.MethodConfig` (each key once, with its type, range,
default and comment) in a module that imports no TensorFlow (:mod:`gcl_tf.methods.configs`,
:mod:`gcl_tf.methods.gcl.config`); the class, a :class:`gcl_tf.methods.base.ContinualModel`,
names it (``Config = ERConfig``) and takes its keys as keywords or as ``settings=``.
Everything else is read from the class: the public name ``gcl_tf.<ClassName>``, its label in
tables, the tuner's default space, distribution support and the memory estimate (docs/api.md,
"Adding a method"). Modules are imported on first use; this file imports nothing heavy
(``import gcl_tf`` reads the registry without TensorFlow, and a config's method keys are
checked against ``Config`` before TensorFlow loads).
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect

from gcl_tf import precision
from gcl_tf.data.config import IN_STEP_AUGMENTATIONS
from gcl_tf.methods import configs
from gcl_tf.methods.gcl import config as gcl_config

REGISTRY = {  # in the order of the tables' rows (the paper's; GCL, the paper's method, last)
    "finetune": ("gcl_tf.methods.finetune", "Finetune", configs.FinetuneConfig),
    "ewc": ("gcl_tf.methods.ewc", "EWC", configs.EWCConfig),
    "icarl": ("gcl_tf.methods.icarl", "ICaRL", configs.ICaRLConfig),
    "gem": ("gcl_tf.methods.gem", "GEM", configs.GEMConfig),
    "agem": ("gcl_tf.methods.agem", "AGEM", configs.AGEMConfig),
    "er": ("gcl_tf.methods.er", "ER", configs.ERConfig),
    "mer": ("gcl_tf.methods.mer", "MER", configs.MERConfig),
    "derpp": ("gcl_tf.methods.derpp", "DERPP", configs.DERPPConfig),
    "er_ace": ("gcl_tf.methods.er_ace", "ERACE", configs.ERACEConfig),
    "mir": ("gcl_tf.methods.mir", "MIR", configs.MIRConfig),
    "cbrs": ("gcl_tf.methods.cbrs", "CBRS", configs.ERConfig),  # ER's keys: it adds none
    "onpro": ("gcl_tf.methods.onpro", "OnPro", configs.OnProConfig),
    "gcl": ("gcl_tf.methods.gcl.model", "GCL", gcl_config.Config),
}
DEFAULT = "gcl"  # the paper's method: what a config without method.name runs
#: The keywords every method's constructor takes (ContinualModel's).
COMMON_KEYWORDS = ("input_shape", "num_classes", "name", "seed", "batch_size", "eval_batch_size", "augment")


def names() -> list[str]:
    """Names of the methods whose module is present."""
    return [name for name, (module, _, _) in REGISTRY.items() if importlib.util.find_spec(module) is not None]


def exports() -> dict:
    """``{public class name: (module, class name)}``: the ``gcl_tf.<Name>`` of every method."""
    return {cls: (module, cls) for module, cls, _ in REGISTRY.values()}


def registered_as(cls) -> str | None:
    """The registry key of ``cls`` itself (defined in its registry module or a module of that
    package), else None."""
    for name, (module, class_name, _) in REGISTRY.items():
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
    """The method's ``Config`` (its keys; no TensorFlow: the registry holds it)."""
    return REGISTRY[name][2]


def method_class(name: str):
    return getattr(module(name), REGISTRY[name][1])


def distributed_names() -> list[str]:
    """Names of the methods that run under a tf.distribute strategy (``supports_distribution``)."""
    return [name for name in names() if method_class(name).supports_distribution]


def augmenting_names() -> list[str]:
    """Names of the methods that take an in-step augmentation (``augments_in_step``)."""
    return [name for name in names() if config_class(name).augments_in_step]


def run_arguments(config, input_shape, num_classes: int) -> dict:
    """What the method's constructor takes from a run's config besides its ``method`` keys and
    the backbone: the common keywords every method takes (the seed, the batch sizes, the
    classes, ...) and those of the stream's tasks its constructor names (``num_tasks``, ...)."""
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
    named = inspect.signature(method_class(config.method.name)).parameters
    return {key: value for key, value in run.items() if key in COMMON_KEYWORDS or key in named}


def build(config, input_shape, num_classes: int):
    """The method a run's config describes: its ``method`` section as its settings, the backbone
    from ``model``, and from the other sections what the method's constructor takes
    (:func:`run_arguments`); its layers under the configured Keras dtype policy
    (``train.mixed_precision``, which :func:`gcl_tf.config.resolve` checked against the method)."""
    from gcl_tf.backbones import build_backbone, torch_default_init  # (TensorFlow: deferred to a build)

    with precision.policy_scope(config.train.mixed_precision):
        method = method_class(config.method.name)(build_backbone(config.model, input_shape), settings=config.method,
                                                  **run_arguments(config, input_shape, num_classes))
    if config.model.initializer == "torch":
        torch_default_init(method)
    return method
