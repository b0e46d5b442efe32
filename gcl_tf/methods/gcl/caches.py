"""GCL's evaluation caches: the test-time graph noise and the memory's embeddings, each computed
once per evaluation instead of once per test batch. Plain objects, not model state."""
from __future__ import annotations

import math

import tensorflow as tf

from gcl_tf.methods.gcl.graph import logistic_noise

# The largest test-noise cache kept (bytes): test_graph_samples * eval batch * memory floats.
TEST_NOISE_CACHE_BYTES = 256 * 2**20


def keep(variables, values, *bookkeeping):
    """Store ``values`` in the cache ``variables`` (with the ``bookkeeping`` writes) and return
    them, read after the writes: the fill branch of both evaluation caches."""
    with tf.control_dependencies([v.assign(x) for v, x in zip(variables, values)] + list(bookkeeping)):
        return tuple(tf.identity(x) for x in values)


class TestNoiseCache:
    """The logistic noise of the test-time graphs, drawn once per evaluation.

    Within one evaluation every test batch has the same shape and the same seed (the seed
    only moves with the training step), so every batch already gets the same noise [S, N, M];
    drawing it is most of the cost of a graph sample (Philox uniforms and two logs per edge,
    about twice the aggregation GEMM). This keeps it in a variable and redraws it only when
    the seed changes: the predictions are exactly those of drawing it each batch.

    A plain object, not a tracked attribute: a cache is not state, so checkpoints and
    SavedModels do not carry it.
    """

    def __init__(self, shape):
        self.shape = tuple(int(d) for d in shape)
        with tf.init_scope():
            self.noise = tf.Variable(tf.zeros(self.shape), trainable=False, name="test_noise")
            self.seed = tf.Variable(tf.fill([2], tf.int32.min), trainable=False, name="test_noise_seed")

    @staticmethod
    def fits(shape) -> bool:
        return math.prod(shape) * 4 <= TEST_NOISE_CACHE_BYTES

    def get(self, seed):
        """Noise for ``seed`` [S, N, M]: the cached draw, or a new one if the seed moved."""

        def redraw():
            return keep([self.noise], [logistic_noise(self.shape, seed)], self.seed.assign(seed))[0]

        stale = tf.reduce_any(tf.not_equal(self.seed, seed))
        return tf.cond(stale, redraw, self.noise.read_value)


class ContextCache:
    """What a prediction needs of the memory, computed once per evaluation span.

    Every test batch of an evaluation attends to the same memory through the same weights, so
    the contexts' edge embeddings and aggregated values ([M, H] and [M, H + K + 1]: the trunk on
    all M memory images) are the same for every batch. Inside :meth:`ContinualModel.evaluation_scope`
    the first batch computes and keeps them, the others read them; outside a scope (or after it)
    nothing is read from here. Like the noise cache, a plain object (not state).
    """

    def __init__(self, capacity: int, hidden: int, width: int):
        with tf.init_scope():
            self.active = tf.Variable(False, trainable=False, name="context_cache_active")
            self.valid = tf.Variable(False, trainable=False, name="context_cache_valid")
            self.embeddings = tf.Variable(tf.zeros([capacity, hidden]), trainable=False, name="context_embeddings")
            self.values = tf.Variable(tf.zeros([capacity, width]), trainable=False, name="context_values")

    def open(self) -> None:
        self.valid.assign(False)
        self.active.assign(True)

    def close(self) -> None:
        self.active.assign(False)
        self.valid.assign(False)

    def get(self, compute):
        """``compute() -> (embeddings, values)``, or its result kept from earlier in this span."""

        def fill():
            return keep([self.embeddings, self.values], compute(), self.valid.assign(True))

        def cached():
            return tf.cond(self.valid, lambda: (self.embeddings.read_value(), self.values.read_value()), fill)

        return tf.cond(self.active, cached, compute)
