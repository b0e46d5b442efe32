"""Mixed precision (``train.mixed_precision``) through Keras's dtype policies.

``float32`` (the default), ``mixed_float16`` or ``mixed_bfloat16``: the layers a method builds
(trunks, heads, classifiers) are created under that Keras dtype policy (:func:`policy_scope`
around :func:`gcl_tf.methods.build`; a saved learner records it and loads under it), so they keep float32
variables and compute in float16 / bfloat16; the method itself (the outer ``keras.Model``) keeps
the float32 policy, and what it computes around its layers stays float32: every method's losses
(:func:`gcl_tf.methods.base.cross_entropy` casts the logits) and GCL's graph math (kernel,
logit of exp, relaxed-Bernoulli samples, row normalisation, aggregation, regulariser), which
reads the layers' outputs cast to float32. Memories hold float32 images as they were stored.

float16 needs loss scaling (its gradients underflow): the optimizer is wrapped in Keras's
``LossScaleOptimizer`` and :meth:`ContinualModel.apply_gradients` scales the loss. Methods that
compute and apply their own gradients (GEM, A-GEM and MER project or interpolate them; their
class says ``supports_loss_scaling = False``) are refused under float16 with one line; bfloat16
(float32's exponent range) needs no scaling and runs every method.
"""
from __future__ import annotations

import contextlib

from gcl_tf.errors import ConfigError

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


def check(method_name: str, policy: str, loss_scaling: bool = True) -> None:
    """One-line ConfigError when ``method_name`` cannot run under ``policy``; ``loss_scaling``:
    whether its gradients go through ContinualModel.apply_gradients (the class's
    ``supports_loss_scaling``), which mixed_float16 needs."""
    if policy not in POLICIES:
        raise ConfigError(f"train.mixed_precision: {policy!r} is not allowed; allowed: {', '.join(POLICIES)}")
    if policy == "mixed_float16" and not loss_scaling:
        raise ConfigError(
            f"train.mixed_precision: mixed_float16 needs loss scaling, which method {method_name} (its own "
            "gradient projection or weight updates) does not take; allowed: float32, mixed_bfloat16"
        )


@contextlib.contextmanager
def policy_scope(policy: str):
    """Layers created inside get the Keras dtype policy ``policy`` (the global policy is restored
    on exit, so other models built later in the process are not affected)."""
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def wrap_optimizer(optimizer, policy: str):
    """The optimizer, in a dynamic ``LossScaleOptimizer`` under ``mixed_float16``."""
    if policy != "mixed_float16":
        return optimizer
    import keras

    return keras.optimizers.LossScaleOptimizer(optimizer)


def float32(x):
    """``x`` as float32 (a layer's output under a mixed policy; no op when it already is)."""
    import tensorflow as tf

    return x if x.dtype == tf.float32 else tf.cast(x, tf.float32)
