"""GEM: gradient episodic memory (Lopez-Paz & Ranzato 2017), following the authors' code
(``model/gem.py`` of facebookresearch/GradientEpisodicMemory), which the GCL paper adopted.

Each task keeps ``memory_size // num_tasks`` samples (GEM's ``n_memories``) in a ring buffer
written with the task's incoming batches. At every step the gradient ``g_k`` of each past task's
memory loss is computed (each memory in one batch) and the current gradient ``g`` is checked
against them; if any ``<g, g_k> < 0`` it is replaced by the solution of GEM's dual QP

    v* = argmin_{v >= margin} 1/2 v^T (G G^T + eps I) v + (G g)^T v,   g~ = g + G^T v*,

with ``G`` the ``[t, P]`` matrix of past-task gradients, ``margin`` the paper's memory strength and
``eps = 1e-3`` as in the repository. ``<g~, g_k> >= -eps v*_k`` holds for every past task (the QP's
optimality conditions). The QP is solved in the graph by an exact active-set method
(:func:`nonnegative_qp`, Lawson-Hanson style) on a fixed ``[T, T]`` problem where tasks not seen
yet are inert, so the step keeps one shape; it is tested against ``quadprog``.

Task-aware: with ``benchmark.multi_head`` the losses of task ``t`` (current or memory) only see
task ``t``'s classes, as GEM does on CIFAR100.
"""
from __future__ import annotations

import tensorflow as tf

from gcl_tf.backbones import classifier
from gcl_tf.memory import TaskMemory, per_task_memory
from gcl_tf.methods.base import ContinualModel, cross_entropy, mask_logits
from gcl_tf.methods.common import (
    TaskClasses,
    flatten,
    num_elements,
    unflatten,
)
from gcl_tf.methods.configs import GEMConfig

#: Ridge added to the QP's Gram matrix, as in the GEM repository's ``project2cone2``.
GEM_EPS = 1e-3


# ----------------------------------------------------------------------------- pure math


def _solve_on(Q, c, passive):
    """The equality-constrained solution on the ``passive`` coordinates (0 elsewhere)."""
    both = tf.logical_and(passive[:, None], passive[None, :])
    Qp = tf.where(both, Q, tf.eye(int(Q.shape[0]), dtype=Q.dtype))
    rhs = tf.where(passive, -c, tf.zeros_like(c))
    s = tf.linalg.solve(Qp, rhs[:, None])[:, 0]
    return tf.where(passive, s, tf.zeros_like(s))


def _feasible_solution(Q, c, tol, u, passive):
    """Lawson-Hanson's inner loop: solve on the passive set and step back towards ``u`` while a
    passive coordinate of the solution is not positive, dropping the coordinates that reach 0."""
    n, dtype = int(Q.shape[0]), Q.dtype

    def cond(k, u, passive, done):
        return tf.logical_and(tf.logical_not(done), k < n + 1)

    def body(k, u, passive, done):
        s = _solve_on(Q, c, passive)
        bad = tf.logical_and(passive, s <= 0)
        any_bad = tf.reduce_any(bad)

        def accept():
            return s, passive

        def step_back():
            infinite = tf.fill([n], tf.cast(float("inf"), dtype))
            ratio = tf.where(bad, u / tf.where(bad, u - s, tf.ones_like(u)), infinite)
            alpha = tf.reduce_min(ratio)
            u_new = u + alpha * (s - u)
            keep = tf.logical_and(passive, u_new > tol)
            return tf.where(keep, u_new, tf.zeros_like(u_new)), keep

        u_new, passive_new = tf.cond(any_bad, step_back, accept)
        return k + 1, u_new, passive_new, tf.logical_not(any_bad)

    _, u, passive, _ = tf.while_loop(cond, body, (tf.constant(0), u, passive, tf.constant(False)))
    return u, passive


def nonnegative_qp(Q, c, max_iterations=None):
    """Solve ``min_{u >= 0} 1/2 u^T Q u + c^T u`` for a symmetric positive definite ``Q`` [n, n].

    Active-set method of Lawson & Hanson adapted to a quadratic objective: grow a passive set
    with the coordinate of steepest descent, solve the equality-constrained problem on it and
    step back to feasibility when a coordinate would turn negative. Exact up to round-off in
    finitely many steps; fixed shapes (masked solves), so it runs inside a compiled step.
    Computes in the dtype of ``Q`` (use float64).
    """
    Q = tf.convert_to_tensor(Q)
    c = tf.convert_to_tensor(c, Q.dtype)
    n = int(Q.shape[0])
    if max_iterations is None:
        max_iterations = 3 * n + 10
    dtype = Q.dtype
    scale = tf.reduce_max(tf.abs(c)) + tf.reduce_max(tf.abs(tf.linalg.diag_part(Q))) + 1e-300
    tol = tf.cast(1e-12, dtype) * scale

    def cond(it, u, passive, done):
        return tf.logical_and(tf.logical_not(done), it < max_iterations)

    def body(it, u, passive, done):
        w = -(tf.linalg.matvec(Q, u) + c)  # negative gradient
        candidates = tf.logical_and(tf.logical_not(passive), w > tol)
        stop = tf.logical_not(tf.reduce_any(candidates))

        def grow():
            j = tf.argmax(tf.where(candidates, w, tf.fill([n], tf.cast(-float("inf"), dtype))), output_type=tf.int32)
            return _feasible_solution(Q, c, tol, u, tf.logical_or(passive, tf.equal(tf.range(n), j)))

        u_new, passive_new = tf.cond(stop, lambda: (u, passive), grow)
        return it + 1, u_new, passive_new, stop

    u0 = tf.zeros([n], dtype)
    p0 = tf.zeros([n], tf.bool)
    _, u, _, _ = tf.while_loop(cond, body, (tf.constant(0), u0, p0, tf.constant(False)))
    return u


def gem_dual(P, b, valid, margin, eps=GEM_EPS):
    """GEM's dual ``argmin_{v >= margin} 1/2 v^T (P + eps I) v + b^T v`` over the ``valid`` tasks.

    ``P`` [T, T] Gram matrix of the task gradients, ``b = G g`` [T], ``valid`` [T] bool. Entries of
    invalid tasks are returned as 0. Computes in float64.
    """
    P = tf.cast(P, tf.float64)
    b = tf.cast(b, tf.float64)
    on = tf.cast(valid, tf.float64)
    both = on[:, None] * on[None, :]
    Qv = (P + eps * tf.eye(tf.shape(P)[0], dtype=tf.float64)) * both  # the valid block
    m = margin * on
    c = tf.linalg.matvec(Qv, m) + b * on  # substitute v = u + margin
    Q = Qv + tf.linalg.diag(1.0 - on)  # invalid tasks: inert unit coordinates
    u = nonnegative_qp(Q, c)
    return (u + m) * on


def gem_project(g, G, valid, margin, eps=GEM_EPS):
    """GEM's projected gradient ``g + G^T v*`` (see the module docstring).

    ``g`` [P], ``G`` [T, P] (rows of invalid tasks are ignored), ``valid`` [T] bool.
    """
    on = tf.cast(valid, G.dtype)
    G = G * on[:, None]
    P = tf.matmul(G, G, transpose_b=True)
    b = tf.linalg.matvec(G, g)
    v = gem_dual(P, b, valid, margin, eps)
    return g + tf.linalg.matvec(G, tf.cast(v, G.dtype), transpose_a=True)


# ----------------------------------------------------------------------------- method


class GEM(ContinualModel):
    """GEM. ``num_tasks``: tasks in the stream (the memory is split evenly across them);
    ``memory_size``: samples in memory over all tasks; ``margin``: the memory strength;
    ``multi_head``: each loss sees only its task's classes. See
    :class:`~gcl_tf.methods.base.ContinualModel` for the common keywords."""

    Config = GEMConfig
    settings: GEMConfig

    style = ("#2ca02c", "D")
    task_free = False
    tune_grid = {"method.margin": [0.0, 0.1, 0.5, 1.0]}  # the paper's memory strength grid
    test_settings = {"memory_size": 20}

    @classmethod
    def memory_slots(cls, config):  # memory_size // T slots for each of T tasks
        tasks = config.benchmark.num_tasks
        return per_task_memory(config.method.memory_size, tasks, "gem") * tasks

    def __init__(self, backbone=None, *, num_classes, num_tasks, multi_head=False, **keys):
        super().__init__(backbone, num_classes=num_classes, **keys)
        T = int(num_tasks)
        self.num_tasks, self.multi_head = T, bool(multi_head)
        self.network = classifier(self.default_backbone(backbone), self.image_shape, self.num_classes)
        self.task_classes = TaskClasses(T, self.num_classes, multi_head)
        self.memory = TaskMemory(T, per_task_memory(self.settings.memory_size, T, "gem"), self.image_shape)
        self.num_parameters = num_elements(self.network.trainable_variables)

    def get_config(self):
        return {**super().get_config(), "num_tasks": self.num_tasks, "multi_head": self.multi_head}

    def call(self, x, training=False):
        return self.network(x, training=training)

    def on_task_begin(self, task_index, classes):
        super().on_task_begin(task_index, classes)
        self.task_classes.set_task(task_index, classes)

    def task_loss(self, x, y, task, weights=None):
        """Mean cross-entropy of a batch of task ``task`` (restricted to its classes if multi-head)."""
        losses = cross_entropy(y, mask_logits(self(x, training=True), self.task_classes.mask(task)))
        if weights is None:
            return tf.reduce_mean(losses)
        return tf.reduce_sum(weights * losses) / tf.maximum(tf.reduce_sum(weights), 1.0)

    def memory_gradient(self, task):
        """Flat gradient of the loss on task ``task``'s memory."""
        variables = self.network.trainable_variables
        weights = tf.cast(self.memory.valid(task), tf.float32)
        with tf.GradientTape() as tape:
            loss = self.task_loss(self.memory.images[task], self.memory.labels[task], task, weights)
        return flatten(tape.gradient(loss, variables), variables)

    def past_gradients(self, current):
        """[T, P]: the memory gradient of every task before ``current`` (zero rows for the others)."""
        P = self.num_parameters

        def body(t, array):
            g = tf.cond(t < current, lambda: self.memory_gradient(t), lambda: tf.zeros([P]))
            return t + 1, array.write(t, g)

        array = tf.TensorArray(tf.float32, size=self.num_tasks, element_shape=[P])
        _, array = tf.while_loop(lambda t, a: t < self.num_tasks, body, (tf.constant(0), array))
        return array.stack()

    def learn(self, x, y):
        task = self.current_task
        self.memory.add(task, x, y)
        variables = self.network.trainable_variables
        G = self.past_gradients(task)
        with tf.GradientTape() as tape:
            loss = self.task_loss(x, y, task)
        g = flatten(tape.gradient(loss, variables), variables)
        valid = tf.range(self.num_tasks) < task
        dots = tf.linalg.matvec(G, g)
        violated = tf.logical_and(valid, dots < 0)
        any_violated = tf.reduce_any(violated)
        g = tf.cond(any_violated, lambda: gem_project(g, G, valid, self.settings.margin), lambda: g)
        self.optimizer.apply(unflatten(g, variables), variables)
        return {"loss": loss, "violations": tf.reduce_sum(tf.cast(violated, tf.float32))}
