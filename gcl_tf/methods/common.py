"""Pieces shared by the task-aware baselines (EWC, GEM, A-GEM, iCaRL): flat gradient vectors,
per-task class masks, a task's data on the host (their memories: :mod:`gcl_tf.memory`).

Task boundaries: a method with ``task_free = False`` relies on ``on_task_begin`` /
``on_task_end`` at every task change (:class:`gcl_tf.callbacks.TaskBoundary`, which ``fit``
adds for each call when none is given).
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

# ----------------------------------------------------------------------------- flat vectors


def flatten(tensors, like=None) -> tf.Tensor:
    """Concatenate tensors into one flat float vector; ``None`` entries become zeros shaped as ``like``."""
    parts = []
    for i, t in enumerate(tensors):
        if t is None:
            t = tf.zeros_like(like[i])
        parts.append(tf.reshape(tf.convert_to_tensor(t), [-1]))
    return tf.concat(parts, axis=0)


def unflatten(vector, like) -> list:
    """Split a flat vector back into tensors shaped as the variables or tensors in ``like``."""
    sizes = [int(np.prod(v.shape)) for v in like]
    return [tf.reshape(part, v.shape) for part, v in zip(tf.split(vector, sizes), like)]


def num_elements(variables) -> int:
    return int(sum(int(np.prod(v.shape)) for v in variables))


# ----------------------------------------------------------------------------- task class masks


class TaskClasses(tf.Module):
    """Per-task class masks ``[T, K]`` (all True unless multi-head) and the current task's mask.

    With ``multi_head`` the training loss of a sample of task ``t`` only sees the classes of task
    ``t`` (as in GEM's multi-head CIFAR100 setting); otherwise every class.
    """

    def __init__(self, num_tasks: int, num_classes: int, multi_head: bool, name: str = "task_classes"):
        super().__init__(name=name)
        self.multi_head = bool(multi_head)
        self.num_tasks = int(num_tasks)
        self.num_classes = int(num_classes)
        with self.name_scope:
            self.masks = tf.Variable(tf.ones([self.num_tasks, self.num_classes], tf.bool), trainable=False,
                                     name="masks")

    def set_task(self, task_index: int, classes) -> None:
        """Record the classes of task ``task_index`` (host side, at the task's start)."""
        if not self.multi_head:
            return
        if not 0 <= task_index < self.num_tasks:
            raise ValueError(f"task index {task_index} outside [0, {self.num_tasks})")
        row = np.zeros(self.num_classes, bool)
        row[np.asarray(classes, dtype=np.int64)] = True
        self.masks[task_index].assign(row)

    def mask(self, task) -> tf.Tensor:
        """[K] bool mask of task ``task`` (a scalar tensor)."""
        return tf.gather(self.masks, task)


# ----------------------------------------------------------------------------- task data on the host


def collect_dataset(dataset, limit=None, unique: bool = False):
    """Images and labels of a task's stream (``(x, y)`` batches) as numpy arrays.

    ``limit`` keeps the first samples in stream order; ``unique`` drops repeated images (the
    stream of several epochs visits every sample once per epoch).
    """
    xs, ys, total = [], [], 0
    for batch in dataset:
        x, y = batch[0], batch[1]
        xs.append(np.asarray(x))
        ys.append(np.asarray(y))
        total += len(ys[-1])
        if limit is not None and total >= limit:
            break
    if not xs:
        return None, None
    x = np.concatenate(xs)
    if x.dtype == np.uint8:  # the stream's images, as the model sees them
        x = x.astype(np.float32) / 255.0
    y = np.concatenate(ys).astype(np.int32)
    if limit is not None:
        x, y = x[:limit], y[:limit]
    if unique:
        flat = x.reshape(len(x), -1)
        _, first = np.unique(flat, axis=0, return_index=True)
        keep = np.sort(first)
        x, y = x[keep], y[keep]
    return x, y
