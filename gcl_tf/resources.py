"""Memory a run needs, checked before its model is built.

A method's class estimates a run's largest buffers from its config (``memory_estimate``,
gcl_tf/methods/hooks.py: the episodic memory's images, its per-sample fields, the method's other
buffers); it is a lower bound: weights, activations and TensorFlow's own buffers come on top.
:func:`check_memory` refuses a run whose buffers exceed the memory of the device they live on:
the GPU's (the smallest, with several) when one is used, else the host's available RAM.
"""
from __future__ import annotations

import os

from gcl_tf.errors import OutOfMemory

GIB = 2**30


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


def check_memory(buffers, subject: str, advice: str, available: int | None = None, where: str = "") -> None:
    """A one-line OutOfMemory, ``"{subject} needs at least ... ; {advice}"``, when the run's
    largest ``buffers`` (``[(what, bytes)]``) exceed ``available`` bytes (default:
    :func:`device_memory`)."""
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
    raise OutOfMemory(f"{subject} needs at least {_size(needed)} ({parts}) but {_size(available)} of "
                      f"{where or 'memory'} is there; {advice}")
