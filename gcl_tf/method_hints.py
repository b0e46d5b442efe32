"""What a config asks of a method that it does not have, said before TensorFlow loads (issue 71):
``method.graph_lambda=10`` with ER is a key of another method, not an unknown one
(:func:`of_another_method`); ``benchmark.augment: ocl`` with a method that does not augment inside
its step is refused by :func:`precheck`, as its ``Config`` (no TensorFlow) says."""
from __future__ import annotations

import dataclasses

from gcl_tf import methods
from gcl_tf.errors import ConfigError


def _keys(config_class) -> list[str]:
    return [f.name for f in dataclasses.fields(config_class) if f.name != "name"]


def of_another_method(error: ConfigError, name: str, section: dict, config_class) -> ConfigError:
    """``error`` (building method ``name``'s section) as the key of another method it is, when a
    key of ``section`` belongs to other methods and not to ``name``; else ``error`` itself.
    ``config_class(name)``: a method's ``Config`` (read without TensorFlow before it loads)."""
    own = _keys(config_class(name))
    for key in section:
        if key == "name" or key in own:
            continue
        owners = [m for m in methods.names() if m != name and key in _keys(methods.config_class(m))]
        if owners:
            switch = f", or method.name={owners[0]}" if len(owners) == 1 else ""
            return ConfigError(f"method.{key}: a key of {', '.join(owners)}; the method is {name}, which has no "
                               f"such key; allowed: {name}'s keys ({', '.join(own) or 'none'}){switch}")
    return error


# ----------------------------------------------------------------------------- before TensorFlow
def augmenting(name: str) -> bool:
    """Whether method ``name`` takes an in-step augmentation (its ``Config``'s ``augments_in_step``)."""
    return methods.config_class(name).augments_in_step


def precheck(config) -> None:
    """The rule between a method and ``benchmark.augment`` that its class states (an in-step
    augmentation only for a method that augments inside its step), before TensorFlow loads."""
    from gcl_tf.data.config import IN_STEP_AUGMENTATIONS

    augment, name = config.benchmark.augment, config.method.name
    if augment in IN_STEP_AUGMENTATIONS and augment != "none" and not augmenting(name):
        others = ", ".join(m for m in methods.names() if augmenting(m))
        raise ConfigError(f"benchmark.augment: {augment} is applied inside the training step, which {name} does "
                          f"not augment; allowed: none or flip with {name} (in-step augmentation is for {others})")
