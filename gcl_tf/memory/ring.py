"""GEM's and A-GEM's episodic memory: a ring buffer per task, in tf.Variables."""
from __future__ import annotations

import tensorflow as tf

from gcl_tf.errors import ConfigError


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
            self.labels = tf.Variable(tf.zeros([self.num_tasks, self.per_task], tf.int32), trainable=False,
                                      name="labels")
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
