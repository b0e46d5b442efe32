"""Pieces shared by the task-aware baselines (EWC, GEM, A-GEM, iCaRL): flat gradient vectors,
per-task class masks, a per-task ring-buffer episodic memory held in tf.Variables.

Task boundaries: a method with ``task_free = False`` relies on ``on_task_begin`` /
``on_task_end`` at every task change (:class:`gcl_tf.callbacks.TaskBoundary`, which ``fit``
adds for each call when none is given).
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from gcl_tf.errors import ConfigError


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
            self.masks = tf.Variable(tf.ones([self.num_tasks, self.num_classes], tf.bool), trainable=False, name="masks")

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


# ----------------------------------------------------------------------------- episodic memory


class TaskMemory(tf.Module):
    """Per-task episodic memories: a ring buffer of ``per_task`` slots for each of ``num_tasks`` tasks.

    As GEM's ``memory_data[t]``: each incoming batch of task ``t`` is written at the task's write
    position, which wraps around, so the buffer keeps the task's most recent samples. Shapes never
    change (``[T, n, ...]``), so the compiled step that writes and reads it traces once.
    """

    def __init__(self, num_tasks: int, per_task: int, image_shape, name: str = "task_memory"):
        super().__init__(name=name)
        if per_task < 1:
            raise ValueError("per-task memory must hold at least one sample")
        self.num_tasks = int(num_tasks)
        self.per_task = int(per_task)
        self.image_shape = tuple(int(d) for d in image_shape)
        with self.name_scope:
            self.images = tf.Variable(
                tf.zeros((self.num_tasks, self.per_task) + self.image_shape), trainable=False, name="images"
            )
            self.labels = tf.Variable(tf.zeros([self.num_tasks, self.per_task], tf.int32), trainable=False, name="labels")
            self.count = tf.Variable(tf.zeros([self.num_tasks], tf.int32), trainable=False, name="count")
            self.position = tf.Variable(tf.zeros([self.num_tasks], tf.int32), trainable=False, name="position")

    @property
    def capacity(self) -> int:
        return self.num_tasks * self.per_task

    def add(self, task, images, labels) -> None:
        """Write a batch into task ``task``'s ring buffer (only its last ``per_task`` samples if larger)."""
        batch = int(images.shape[0])
        n = self.per_task
        task = tf.cast(task, tf.int32)
        start = self.position[task]
        first = max(0, batch - n)  # static: earlier samples would be overwritten within the batch
        offsets = tf.range(first, batch, dtype=tf.int32)
        slots = tf.math.floormod(start + offsets, n)
        index = tf.stack([tf.fill(tf.shape(slots), task), slots], axis=1)  # [b, 2]
        self.images.scatter_nd_update(index, images[first:])
        self.labels.scatter_nd_update(index, tf.cast(labels[first:], tf.int32))
        self.position.scatter_nd_update([[task]], [tf.math.floormod(start + batch, n)])
        self.count.scatter_nd_update([[task]], [tf.minimum(self.count[task] + batch, n)])

    def valid(self, task) -> tf.Tensor:
        """[n] bool: filled slots of task ``task``."""
        return tf.range(self.per_task) < self.count[task]

    def valid_before(self, task) -> tf.Tensor:
        """[T * n] bool: filled slots of the tasks before ``task`` (flattened task-major)."""
        slot = tf.range(self.per_task)[None, :] < self.count[:, None]  # [T, n]
        past = tf.range(self.num_tasks)[:, None] < tf.cast(task, tf.int32)  # [T, 1]
        return tf.reshape(tf.logical_and(slot, past), [-1])

    def flat_images(self) -> tf.Tensor:
        return tf.reshape(self.images, (self.capacity,) + self.image_shape)

    def flat_labels(self) -> tf.Tensor:
        return tf.reshape(self.labels, [self.capacity])

    def flat_tasks(self) -> tf.Tensor:
        """[T * n] int32: the task of each flattened slot."""
        return tf.repeat(tf.range(self.num_tasks, dtype=tf.int32), self.per_task)


def per_task_memory(memory_size: int, num_tasks_: int, method_name: str) -> int:
    """GEM's ``n_memories``: the shared budget split evenly across tasks."""
    per_task = memory_size // num_tasks_
    if per_task < 1:
        raise ConfigError(
            f"method.memory_size: {memory_size} gives {method_name} no slot for each of the {num_tasks_} tasks; "
            f"allowed: at least {num_tasks_}"
        )
    return per_task


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
