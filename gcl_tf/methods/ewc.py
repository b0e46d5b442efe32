"""EWC: elastic weight consolidation (Kirkpatrick et al. 2017), with the semantics of the GEM
repository's implementation (``model/ewc.py``), which the GCL paper adopted.

At the end of task ``t`` the diagonal empirical Fisher ``F_t`` is estimated on the task's first
``fisher_samples`` stream samples (GEM's ``n_memories`` samples kept per task) and stored with the
parameters ``theta_t`` reached at that point. While learning later tasks the loss is

    CE + ewc_lambda * sum_{t' < t} sum_i F_{t', i} (theta_i - theta_{t', i})^2

(no 1/2 factor, one anchor per past task, as in GEM's code). The per-task sum is kept in a fixed
size by the exact identity ``sum_t F_t (p - a_t)^2 = A (p - mu)^2 + K`` with ``A = sum_t F_t``,
``mu = sum_t F_t a_t / A`` and the constant ``K = sum_t F_t (a_t - mu)^2``: the loss, its gradient
and the checkpointed state do not grow with the number of tasks.

Fisher (``fisher``): ``empirical`` (default), the empirical Fisher of the EWC paper, the mean over
samples of the squared per-sample gradient of the log-likelihood ``log p(y | x)`` (computed in a
compiled loop); or ``squared_mean``, what the GEM repository computes, the square of the gradient
of the mean loss of those samples. The second is much smaller (the mean gradient nearly vanishes
once the task is learned), so the paper's ``ewc_lambda`` (tuned with GEM's code) can be too strong
for the first: plain SGD on the penalty is only stable while ``learning_rate * 2 * ewc_lambda *
sum_t F_t < 2`` for every weight. Both use BatchNorm in inference mode.
Multi-head (``benchmark.multi_head``): the likelihood and the training loss only see the task's
classes, as GEM does on CIFAR100. Needs task boundaries.
"""
from __future__ import annotations

import tensorflow as tf

from gcl_tf.backbones import classifier
from gcl_tf.methods.base import ContinualModel, cross_entropy, mask_logits
from gcl_tf.methods.common import TaskClasses, collect_dataset
from gcl_tf.methods.configs import EWCConfig

# ----------------------------------------------------------------------------- pure math


def empirical_fisher(nll_fn, variables, x, y):
    """Diagonal empirical Fisher: the mean over samples of the squared per-sample gradient.

    ``nll_fn(x_i, y_i)`` returns the scalar negative log-likelihood of one sample given as a
    batch of one (``x_i`` [1, ...], ``y_i`` [1]). Returns one tensor per variable, shaped like it.
    Runs the samples one by one in a ``tf.while_loop`` (a fixed graph for any sample count).
    """
    n = tf.shape(x)[0]
    zeros = [tf.zeros(v.shape, v.dtype) for v in variables]

    def body(i, acc):
        with tf.GradientTape() as tape:
            loss = nll_fn(x[i:i + 1], y[i:i + 1])
        grads = tape.gradient(loss, variables)
        return i + 1, [a if g is None else a + tf.square(g) for a, g in zip(acc, grads)]

    _, total = tf.while_loop(lambda i, acc: i < n, body, (tf.constant(0), zeros))
    denom = tf.cast(tf.maximum(n, 1), variables[0].dtype)
    return [t / denom for t in total]


def squared_mean_gradient(nll_fn, variables, x, y):
    """GEM's Fisher: the elementwise square of the gradient of the mean loss over the samples.

    ``nll_fn(x, y)`` returns the summed negative log-likelihood of the batch.
    """
    n = tf.cast(tf.maximum(tf.shape(x)[0], 1), variables[0].dtype)
    with tf.GradientTape() as tape:
        loss = nll_fn(x, y) / n
    grads = tape.gradient(loss, variables)
    return [tf.zeros(v.shape, v.dtype) if g is None else tf.square(g) for v, g in zip(variables, grads)]


def merge_quadratic(importance, anchor, offset, fisher, params):
    """Fold ``F (p - params)^2`` into ``A (p - mu)^2 + K`` (one variable's arrays).

    Returns the new ``(A, mu, K_increment)`` with ``A' = A + F``, ``mu' = (A mu + F params) / A'``
    (``params`` where ``A' = 0``) and ``K' - K = sum A (mu - mu')^2 + F (params - mu')^2``.
    """
    total = importance + fisher
    safe = tf.where(total > 0, total, tf.ones_like(total))
    mean = tf.where(total > 0, (importance * anchor + fisher * params) / safe, params)
    increment = tf.reduce_sum(importance * tf.square(anchor - mean) + fisher * tf.square(params - mean))
    return total, mean, offset + increment


def quadratic_penalty(importance, anchor, params):
    """``sum_i A_i (p_i - mu_i)^2`` over lists of tensors."""
    return tf.add_n([tf.reduce_sum(a * tf.square(p - m)) for a, m, p in zip(importance, anchor, params)])


# ----------------------------------------------------------------------------- state


class EWCState(tf.Module):
    """Accumulated Fisher ``A``, the Fisher-weighted mean anchor ``mu`` and the constant ``K``."""

    def __init__(self, variables, name: str = "ewc"):
        super().__init__(name=name)
        with self.name_scope:
            self.importance = [
                tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name=f"fisher_{i}")
                for i, v in enumerate(variables)
            ]
            self.anchor = [
                tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name=f"anchor_{i}")
                for i, v in enumerate(variables)
            ]
            self.offset = tf.Variable(tf.constant(0.0), trainable=False, name="offset")
            self.num_tasks = tf.Variable(tf.constant(0, tf.int32), trainable=False, name="num_tasks")

    def penalty(self, params) -> tf.Tensor:
        """``sum_t sum_i F_{t,i} (p_i - theta_{t,i})^2`` over the consolidated tasks."""
        return quadratic_penalty(self.importance, self.anchor, params) + self.offset

    def consolidate(self, fisher, params) -> None:
        offset = self.offset
        for a, m, f, p in zip(self.importance, self.anchor, fisher, params):
            total, mean, offset = merge_quadratic(a, m, offset, f, tf.convert_to_tensor(p))
            a.assign(total)
            m.assign(mean)
        self.offset.assign(offset)
        self.num_tasks.assign_add(1)


# ----------------------------------------------------------------------------- method


class EWC(ContinualModel):
    """EWC. ``num_tasks``: tasks in the stream; ``ewc_lambda``: penalty strength;
    ``fisher_samples``: samples of each finished task behind its Fisher; ``fisher``:
    ``"squared_mean"`` (GEM's code) or ``"empirical"``; ``multi_head``: each loss sees only its
    task's classes. See :class:`~gcl_tf.methods.base.ContinualModel` for the common keywords."""

    Config = EWCConfig
    settings: EWCConfig

    style = ("#1f77b4", "s")
    task_free = False
    test_settings = {"fisher_samples": 10}
    tune_grid = {"method.ewc_lambda": [0.1, 1.0, 10.0, 100.0, 1000.0]}  # the paper's "regularization" grid

    def __init__(self, backbone=None, *, num_classes, num_tasks, multi_head=False, **keys):
        super().__init__(backbone, num_classes=num_classes, **keys)
        self.num_tasks, self.multi_head = int(num_tasks), bool(multi_head)
        self.network = classifier(self.default_backbone(backbone), self.image_shape, self.num_classes)
        self.task_classes = TaskClasses(num_tasks, self.num_classes, multi_head)
        self.ewc = EWCState(self.network.trainable_variables)
        self._consolidate_fn = tf.function(self._consolidate, reduce_retracing=True)

    def get_config(self):
        return {**super().get_config(), "num_tasks": self.num_tasks, "multi_head": self.multi_head}

    def call(self, x, training=False):
        return self.network(x, training=training)

    def on_task_begin(self, task_index, classes):
        super().on_task_begin(task_index, classes)
        self.task_classes.set_task(task_index, classes)

    def learn(self, x, y):
        mask = self.task_classes.mask(self.current_task)
        variables = self.network.trainable_variables
        with tf.GradientTape() as tape:
            ce = tf.reduce_mean(cross_entropy(y, mask_logits(self(x, training=True), mask)))
            penalty = self.ewc.penalty(variables)
            loss = ce + self.settings.ewc_lambda * penalty
        self.apply_gradients(tape, loss, variables)
        return {"loss": loss, "cross_entropy": ce, "penalty": penalty}

    def _consolidate(self, x, y, task):
        variables = self.network.trainable_variables
        mask = self.task_classes.mask(task)

        def nll(xi, yi):
            return tf.reduce_sum(cross_entropy(yi, mask_logits(self.network(xi, training=False), mask)))

        if self.settings.fisher == "squared_mean":
            fisher = squared_mean_gradient(nll, variables, x, y)
        else:
            fisher = empirical_fisher(nll, variables, x, y)
        self.ewc.consolidate(fisher, variables)
        return fisher

    def on_task_end(self, task_index, dataset):
        x, y = collect_dataset(dataset, limit=self.settings.fisher_samples)
        if x is None:
            return
        self._consolidate_fn(tf.constant(x, tf.float32), tf.constant(y, tf.int32), tf.constant(task_index, tf.int32))
