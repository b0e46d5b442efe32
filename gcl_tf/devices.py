"""Which device a run computes on, and ``train.jit_compile: auto``: XLA where it was measured to win.

``auto`` (the default) compiles the training step with XLA or not by the type of the device
the step runs on, from :data:`JIT_COMPILE_BY_DEVICE`:

- CPU: off. Measured on CPU, the whole GCL step is slower under XLA than with TensorFlow's own
  kernels (``python -m gcl_tf.benchmark throughput``: the "XLA (jit_compile)" row against the
  plain one; the numbers: docs/gpu.md); XLA's CPU GEMMs and random numbers are the slower ones.
- GPU: on. Not yet measured on a GPU: the choice is the expectation that a step of many small
  kernels (batch 10, graph sampling, regulariser, memory update) gains more from XLA's fusion
  than it loses, and it is what ``python -m gcl_tf.benchmark gpu`` checks: its report says which
  choice its own numbers support (docs/gpu.md). Change the entry here if they overturn it.

Two cases stay off whatever the device: a tf.distribute strategy with more than one replica
(the step's collectives have not been measured under XLA) and op determinism (not every XLA
op is deterministic). ``true`` / ``false`` are taken as given.
"""
from __future__ import annotations

#: ``train.jit_compile: auto`` by device type (see the module docstring for the evidence).
JIT_COMPILE_BY_DEVICE = {"CPU": False, "GPU": True}


def compute_device_type() -> str:
    """The type of device the step will run on: under a strategy, its first replica's; inside a
    ``tf.device`` scope, that device's; else ``"GPU"`` when TensorFlow sees a GPU (where it places
    the step by default) and ``"CPU"`` otherwise."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    if tf.distribute.has_strategy():
        devices = tf.distribute.get_strategy().extended.worker_devices
        return tf.DeviceSpec.from_string(devices[0]).device_type or "CPU"
    scope = tf.DeviceSpec.from_string(context.context().device_name or "").device_type
    if scope:
        return scope
    return "GPU" if tf.config.list_logical_devices("GPU") else "CPU"


def resolve_jit_compile(setting, device_type: str | None = None, replicas: int | None = None,
                        deterministic: bool | None = None) -> bool:
    """``train.jit_compile`` as a bool: ``true`` / ``false`` as given, ``"auto"`` by
    :data:`JIT_COMPILE_BY_DEVICE` (off with several replicas or op determinism)."""
    if isinstance(setting, bool):
        return setting
    if setting != "auto":
        raise ValueError(f"jit_compile: {setting!r} is not true, false or auto")
    import tensorflow as tf
    from tensorflow.python.framework.config import is_op_determinism_enabled  # (no public API; Keras reads it)

    if replicas is None:
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if deterministic is None:
        deterministic = is_op_determinism_enabled()
    if replicas > 1 or deterministic:
        return False
    return JIT_COMPILE_BY_DEVICE.get(device_type or compute_device_type(), False)
