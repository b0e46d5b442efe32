"""A-GEM: averaged gradient episodic memory (Chaudhry et al. 2019, "Efficient Lifelong Learning
with A-GEM"), following the authors' code (facebookresearch/agem).

The episodic memory holds samples of past tasks only: like GEM, each task writes its incoming
batches into its own ring buffer of ``memory_size // num_tasks`` slots, and a task's slots become
usable as references once the task is over. At every step after the first task the reference
gradient ``g_ref`` is the gradient of the mean loss on ``agem_batch_size`` samples drawn uniformly
without replacement from the past tasks' memory (all of it when smaller, as in the original),
and the current gradient is projected when it conflicts with it:

    g~ = g - (g . g_ref / g_ref . g_ref) g_ref   if g . g_ref < 0,   else g.

Multi-head (``benchmark.multi_head``): each loss sees the classes of its sample's task.
Deviation: the original keeps a ring buffer per class within each task; here one per task.
"""
from __future__ import annotations

import tensorflow as tf

from gcl_tf import salts
from gcl_tf.backbones import classifier
from gcl_tf.memory import (
    TaskMemory,
    per_task_memory,
    sample_without_replacement,
    step_seed,
)
from gcl_tf.methods.base import ContinualModel, cross_entropy, mask_logits
from gcl_tf.methods.common import (
    TaskClasses,
    flatten,
    unflatten,
)
from gcl_tf.methods.configs import AGEMConfig

# ----------------------------------------------------------------------------- pure math


def agem_project(g, g_ref):
    """A-GEM's projection of the flat gradient ``g`` against the reference gradient ``g_ref``.

    ``g - (g . g_ref / g_ref . g_ref) g_ref`` when ``g . g_ref < 0``; ``g`` otherwise (also when
    ``g_ref`` is zero).
    """
    dot = tf.reduce_sum(g * g_ref)
    ref_sq = tf.reduce_sum(g_ref * g_ref)
    conflict = tf.logical_and(dot < 0, ref_sq > 0)
    scale = tf.where(conflict, dot / tf.where(ref_sq > 0, ref_sq, tf.ones_like(ref_sq)), tf.zeros_like(dot))
    return g - scale * g_ref


# ----------------------------------------------------------------------------- method


class AGEM(ContinualModel):
    """A-GEM. ``num_tasks``: tasks in the stream (the memory is split evenly across them);
    ``memory_size``: samples in memory over all tasks; ``agem_batch_size``: memory samples behind
    the reference gradient; ``multi_head``: each loss sees only its task's classes. See
    :class:`~gcl_tf.methods.base.ContinualModel` for the common keywords."""

    Config = AGEMConfig
    settings: AGEMConfig

    label = "A-GEM"
    style = ("#9467bd", "v")
    task_free = False
    test_settings = {"memory_size": 20, "agem_batch_size": 10}

    @classmethod
    def memory_slots(cls, config):  # memory_size // T slots for each of T tasks
        tasks = config.benchmark.num_tasks
        return per_task_memory(config.method.memory_size, tasks, "agem") * tasks

    def __init__(self, backbone=None, *, num_classes, num_tasks, multi_head=False, **keys):
        super().__init__(backbone, num_classes=num_classes, **keys)
        T = int(num_tasks)
        self.num_tasks, self.multi_head = T, bool(multi_head)
        self.network = classifier(self.default_backbone(backbone), self.image_shape, self.num_classes)
        self.task_classes = TaskClasses(T, self.num_classes, multi_head)
        self.memory = TaskMemory(T, per_task_memory(self.settings.memory_size, T, "agem"), self.image_shape)
        # The memory of past tasks never exceeds (T - 1) * n samples.
        past_capacity = max(1, (T - 1) * self.memory.per_task)
        self.reference_size = min(int(self.settings.agem_batch_size), past_capacity)

    def get_config(self):
        return {**super().get_config(), "num_tasks": self.num_tasks, "multi_head": self.multi_head}

    def call(self, x, training=False):
        return self.network(x, training=training)

    def on_task_begin(self, task_index, classes):
        super().on_task_begin(task_index, classes)
        self.task_classes.set_task(task_index, classes)

    def reference_gradient(self, task):
        """Flat gradient of the mean loss on a random batch of the memory of tasks before ``task``."""
        variables = self.network.trainable_variables
        seed = step_seed(self.seed, self.step_counter, salts.REPLAY)
        index, ok = sample_without_replacement(self.memory.valid_before(task), self.reference_size, seed)
        x = tf.gather(self.memory.flat_images(), index)
        y = tf.gather(self.memory.flat_labels(), index)
        masks = tf.gather(self.task_classes.masks, tf.gather(self.memory.flat_tasks(), index))  # [k, K]
        weights = tf.cast(ok, tf.float32)
        with tf.GradientTape() as tape:
            losses = cross_entropy(y, mask_logits(self(x, training=True), masks))
            loss = tf.reduce_sum(weights * losses) / tf.maximum(tf.reduce_sum(weights), 1.0)
        return flatten(tape.gradient(loss, variables), variables)

    def learn(self, x, y):
        task = self.current_task
        variables = self.network.trainable_variables
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(cross_entropy(y, mask_logits(self(x, training=True), self.task_classes.mask(task))))
        g = flatten(tape.gradient(loss, variables), variables)
        has_reference = tf.reduce_any(self.memory.valid_before(task))
        g_ref = tf.cond(has_reference, lambda: self.reference_gradient(task), lambda: tf.zeros_like(g))
        dot = tf.reduce_sum(g * g_ref)
        g = agem_project(g, g_ref)
        self.optimizer.apply(unflatten(g, variables), variables)
        self.memory.add(task, x, y)
        return {"loss": loss, "projected": tf.cast(dot < 0, tf.float32)}
