"""Memory a run needs, checked before its model is built.

:func:`largest_buffers` estimates a run's largest buffers from its config (a pure function):
the episodic memory's images (stored as float32, as every method keeps them), the other fields it
keeps of each sample (DER++'s logits) and the method's other large buffers (GCL's context graph,
a step's graphs, the test-time noise), as the method's class declares them (``memory_slots``,
``memory_fields``, ``memory_buffers``: gcl_tf/methods/hooks.py). It is a lower bound: weights,
activations and TensorFlow's own buffers come on top. :func:`check_memory` refuses a run whose buffers exceed
the memory of the device they live on: the GPU's (the smallest, with several) when one is
used, else the host's available RAM.
"""
from __future__ import annotations

import math
import os

from gcl_tf import methods
from gcl_tf.errors import OutOfMemory

FLOAT32 = 4
GIB = 2**30


def largest_buffers(config, input_shape, num_classes: int | None = None) -> list[tuple[str, int]]:
    """``(what, bytes)`` of the run's largest buffers on one device, largest first (the memory's
    extra fields counted when ``num_classes``, which they may depend on, is given)."""
    cls = methods.method_class(config.method.name)
    slots = cls.memory_slots(config)
    if not slots:  # finetune, ewc: no episodic memory
        return []
    image = math.prod(int(d) for d in input_shape) * FLOAT32
    buffers = [(f"the memory's {slots} images", slots * image)]
    fields = cls.memory_fields(int(num_classes)) if num_classes is not None else {}
    for name, (shape, dtype) in fields.items():
        per_sample = math.prod(int(d) for d in shape) * _itemsize(dtype)
        buffers.append((f"the memory's {slots} {name} [{', '.join(str(int(d)) for d in shape)}]", slots * per_sample))
    buffers += cls.memory_buffers(config)
    return sorted(buffers, key=lambda item: -item[1])


def _itemsize(dtype) -> int:
    """Bytes of one element of ``dtype`` (a name such as "float32", a NumPy or TensorFlow dtype)."""
    import numpy as np

    return int(np.dtype(getattr(dtype, "as_numpy_dtype", dtype)).itemsize)


# ----------------------------------------------------------------------------- what is there
def host_available(meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes of RAM available to a new allocation: MemAvailable (Linux), capped by a cgroup v2
    memory limit; else the physical memory; None when nothing says."""
    available = None
    try:
        with open(meminfo) as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    limit = _cgroup_room()
    return min(available, limit) if limit is not None else available


def _cgroup_room(root: str = "/sys/fs/cgroup") -> int | None:
    try:
        with open(os.path.join(root, "memory.max")) as handle:
            text = handle.read().strip()
        with open(os.path.join(root, "memory.current")) as handle:
            used = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    return None if text == "max" else max(int(text) - used, 0)


def gpu_memory() -> int | None:
    """Bytes TensorFlow may allocate on the smallest of its GPUs (its allocator's limit), None
    when TensorFlow does not say."""
    from tensorflow.python.client import device_lib

    try:
        limits = [d.memory_limit for d in device_lib.list_local_devices() if d.device_type == "GPU"]
    except Exception:  # noqa: BLE001 - an estimate is no reason to stop a run
        return None
    return min(limits) if limits else None


def device_memory() -> tuple[int | None, str]:
    """``(bytes or None when unknown, where)``: the GPU's memory when TensorFlow uses a GPU, else
    the host's available RAM."""
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        return gpu_memory(), "GPU memory"
    return host_available(), "available RAM"


# ----------------------------------------------------------------------------- the check
def _size(size: int) -> str:
    return f"{size / GIB:.1f} GiB" if size >= GIB / 10 else f"{size / 2**20:.1f} MiB"


def check_memory(config, input_shape, available: int | None = None, where: str = "",
                 num_classes: int | None = None) -> None:
    """A one-line OutOfMemory when the run's largest buffers exceed ``available`` bytes (default:
    :func:`device_memory`)."""
    buffers = largest_buffers(config, input_shape, num_classes)
    needed = sum(size for _, size in buffers)
    if not buffers or needed < 2**20:  # nothing worth asking the device about
        return
    if available is None:
        available, where = device_memory()
        if available is None:
            return
    if needed <= available:
        return
    parts = ", ".join(f"{what} {_size(size)}" for what, size in buffers)
    raise OutOfMemory(
        f"method.memory_size: {config.method.memory_size} needs at least {_size(needed)} ({parts}) but "
        f"{_size(available)} of {where or 'memory'} is there; "
        f"{methods.method_class(config.method.name).memory_advice(config)}"
    )
