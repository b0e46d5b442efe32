"""GCL: Graph-Based Continual Learning (Tang & Matteson, ICLR 2021).

The episodic memory holds context images and labels (reservoir sampling, task-free) and the
logits of the context graph G learned so far. Each step embeds contexts and targets with a
shared trunk and two heads, builds Bernoulli edge logits from an RBF kernel with a learned
scale, samples one relaxed graph (context rows: G, target rows: A), aggregates the contexts'
latent and label embeddings along its normalised rows, and classifies the result. The loss adds
a graph regulariser: contexts whose loss rose above their best keep their stored edges.

Shapes: ``M`` memory capacity (always ``[M, ...]`` with a fill mask), ``T`` targets per batch,
``H`` hidden size, ``K`` classes. Notation follows docs/gcl.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Optional

import keras
import tensorflow as tf
import tensorflow_probability as tfp

from gcl_tf.backbones import build_backbone
from gcl_tf.config import MethodConfig, _range
from gcl_tf.distribute import all_gather, all_mean, gather_in_order, num_replicas, replica_id
from gcl_tf.errors import ConfigError
from gcl_tf.memory import ReservoirMemory, sample_without_replacement, scatter_update, state_variable, step_seed
from gcl_tf.methods.base import ContinualModel, cross_entropy, mask_logits

tfd = tfp.distributions

SALT_TRAIN_GRAPH = 201
SALT_TEST_GRAPH = 202
SALT_CONTEXT_BATCH = 203
ROW_EPS = 1e-12  # guards the L1 normalisation of an all-zero row
LOG_KERNEL_MAX = -1e-6  # log k is clipped below 0 so that logit(k) stays finite


@dataclass
class Config(MethodConfig):
    name: str = "gcl"
    memory_size: int = field(default=1000, metadata=_range(1))
    # Weight of the context cross-entropy (the target cross-entropy has weight 1).
    context_lambda: float = field(default=1.0, metadata=_range(0.0))
    # Weight of the graph regulariser (paper: 50 on SVHN/CIFAR/MiniImageNet, 5000 Rotated MNIST).
    graph_lambda: float = field(default=50.0, metadata=_range(0.0))
    # The regulariser's cold start (our extension, docs/gcl.md): a context's stored edges are
    # held only once the context has been learned, i.e. its best context loss (cross-entropy,
    # nats) is below this value; until then its stored edges follow the current ones.
    # null: the paper (every context whose loss rose above its best is held).
    regularize_below: Optional[float] = field(default=1.0, metadata=_range(0.0, lo_open=True))
    # The RBF kernel's initial width w = exp(s) in log k = -0.5 ||u_i - u_j||^2 / exp(s) (s is
    # learned; our extension, docs/gcl.md). null: sqrt(hidden_size), as the authors initialise it:
    # every edge starts near probability 1 and a short stream ends before the kernel separates
    # the classes.
    kernel_width: Optional[float] = field(default=1.0, metadata=_range(0.0, lo_open=True))
    # Relaxed-Bernoulli temperatures: context graph G (paper: 0.1 MNIST-like, 1 RGB) and
    # context-target graph A (paper: 5); test-time graphs (authors' code: 0.1).
    context_temperature: float = field(default=1.0, metadata=_range(0.0, lo_open=True))
    target_temperature: float = field(default=5.0, metadata=_range(0.0, lo_open=True))
    test_temperature: float = field(default=0.1, metadata=_range(0.0, lo_open=True))
    # Graph samples averaged at test time (paper: 30).
    test_graph_samples: int = field(default=30, metadata=_range(1))
    # false: Bernoulli means sigmoid(logits) instead of sampled graphs (the paper's ablation).
    stochastic_graphs: bool = True
    # How the learned context graph is kept: the [M, M] matrix of edge logits (the paper), or
    # the M edge embeddings u it is recomputed from (linear memory, the paper's appendix).
    edge_memory: Literal["matrix", "embeddings"] = "matrix"
    # Attend to this many memory samples, drawn anew each step, instead of the whole memory, so
    # that a step's cost no longer grows with the memory (needs edge_memory: embeddings).
    # null: the whole memory (the paper).
    context_batch: Optional[int] = field(default=None, metadata=_range(1))
    # Compile the graph regulariser (its element-wise passes over the [k, k] context pairs, forward
    # and backward) with XLA into fused loops; false: plain TensorFlow ops (the same math, one
    # kernel per op, for platforms without XLA).
    fuse_regularizer: bool = True

    def check(self, config):
        if self.context_batch is not None:
            if self.edge_memory != "embeddings":
                raise ConfigError(
                    "method.context_batch: needs method.edge_memory: embeddings (the matrix store needs "
                    "every new sample's edges to the whole memory); allowed: null with matrix"
                )
            if self.context_batch > self.memory_size:
                raise ConfigError(
                    f"method.context_batch: {self.context_batch} is more than method.memory_size "
                    f"{self.memory_size}; allowed: 1 .. {self.memory_size} or null"
                )
        if config.model.backbone == "resnet18":
            raise ConfigError("model.backbone: GCL uses the paper's encoders; allowed: mlp, convnet")


# ------------------------------------------------------------------------------ pure math
def squared_distances(a, b):
    """||a_i - b_j||^2 for a [N, D], b [P, D] -> [N, P] (clamped at 0 against round-off)."""
    a2 = tf.reduce_sum(tf.square(a), axis=1, keepdims=True)  # [N, 1]
    b2 = tf.reduce_sum(tf.square(b), axis=1)[None, :]  # [1, P]
    return tf.maximum(a2 + b2 - 2.0 * tf.matmul(a, b, transpose_b=True), 0.0)


def kernel_factors(u, log_scale):
    """Rows ``(A, B)`` with ``A_i . B_j = log k(i, j)`` for the RBF kernel on embeddings u [N, H].

    log k = -(|u_i|^2 + |u_j|^2 - 2 u_i.u_j) / (2t), t = exp(s), so A = [u, -|u|^2/(2t), 1] and
    B = [u/t, 1, -|u|^2/(2t)]: the whole kernel is one GEMM, with no elementwise pass over the
    [N, P] result (the clip of logit_of_exp keeps log k <= 0 against round-off).
    """
    inverse = tf.exp(-log_scale)
    half_norm = 0.5 * inverse * tf.reduce_sum(tf.square(u), axis=1, keepdims=True)  # [N, 1]
    ones = tf.ones_like(half_norm)
    return tf.concat([u, -half_norm, ones], axis=1), tf.concat([u * inverse, ones, -half_norm], axis=1)


def rbf_log_kernel(a, b, log_scale):
    """log k(i, j) = -0.5 ||a_i - b_j||^2 / exp(log_scale)   [N, P] (may exceed 0 by round-off)."""
    rows, _ = kernel_factors(a, log_scale)
    _, cols = kernel_factors(b, log_scale)
    return tf.matmul(rows, cols, transpose_b=True)


@tf.custom_gradient
def logit_of_exp(log_k):
    """logit(k) = log k - log(1 - k) from log k, stably: x - log(-expm1(x)), x clipped below 0.

    The gradient, 1 / (1 - k) = -1 / expm1(x), reuses the forward's expm1 (0 where clipped).
    """
    x = tf.minimum(log_k, LOG_KERNEL_MAX)
    e = tf.math.expm1(x)  # in [-1, 0)
    logits = x - tf.math.log(-e)

    def grad(dy):
        return tf.where(log_k < LOG_KERNEL_MAX, -dy / e, tf.zeros_like(dy))

    return logits, grad


def edge_logits(u_rows, u_cols, log_scale):
    """Bernoulli logits of the edges between row and column embeddings [N, P]."""
    return logit_of_exp(rbf_log_kernel(u_rows, u_cols, log_scale))


def logistic_noise(shape, seed):
    """Standard logistic noise L (TFP's Logistic sampler), the randomness of a relaxed Bernoulli."""
    return tfd.Logistic(loc=0.0, scale=1.0).sample(shape, seed=seed)


def relaxed_bernoulli(logits, temperature, noise):
    """A reparameterised relaxed-Bernoulli sample sigmoid((logits + L) / t) (Maddison et al. 2017).

    The same value as ``tfd.RelaxedBernoulli(t, logits=logits).sample()`` for the same noise, but
    with finite gradients: TFP's RelaxedBernoulli pushes the logit-space sample through a Sigmoid
    bijector whose ``tf.where(x < -9, exp(x), sigmoid(x))`` overflows in the unused branch when
    the sample saturates (low temperature), which turns the gradient into NaN.
    """
    return tf.sigmoid((logits + noise) / temperature)


def sample_graph(logits, temperature, seed, stochastic: bool = True, sample_shape=()):
    """Reparameterised relaxed-Bernoulli graph(s) in (0, 1), or the Bernoulli means."""
    if not stochastic:
        means = tf.sigmoid(logits)
        if not sample_shape:
            return means
        return tf.broadcast_to(means, tf.concat([tf.constant(sample_shape, tf.int32), tf.shape(means)], 0))
    shape = tf.concat([tf.constant(sample_shape, tf.int32), tf.shape(logits)], 0)
    return relaxed_bernoulli(logits, temperature, logistic_noise(shape, seed))


def normalize_rows(graph, edge_mask):
    """Zero the edges outside ``edge_mask`` (broadcastable to ``graph``) and L1-normalise rows."""
    graph = graph * tf.cast(edge_mask, graph.dtype)
    return graph / tf.maximum(tf.reduce_sum(graph, axis=-1, keepdims=True), ROW_EPS)


def graph_regularizer(current_logits, stored_logits, regularized):
    """The graph regulariser L_G over the regularised context pairs.

    ``current_logits, stored_logits`` [M, M]; ``regularized`` [M] bool (contexts whose loss is
    above their best). Mean over the entries (i, k), i != k, with both ends regularised of the
    Bernoulli cross-entropy between the stored edge probabilities and the current ones, minus
    the (constant) entropy of the stored ones: the KL divergence, which has the cross-entropy's
    gradient and is 0 when nothing was forgotten. 0 when no pair is regularised. Stored edges
    get no gradient.
    """
    m = tf.shape(regularized)[0]
    pairs = tf.logical_and(regularized[:, None], regularized[None, :])
    pairs = tf.logical_and(pairs, tf.logical_not(tf.eye(m, dtype=tf.bool)))
    weights = tf.cast(pairs, current_logits.dtype)
    stored_logits = tf.stop_gradient(stored_logits)
    targets = tf.sigmoid(stored_logits)
    cross_entropy_ = tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=current_logits)
    entropy = tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=stored_logits)
    divergence = cross_entropy_ - entropy  # [M, M]
    return tf.math.divide_no_nan(tf.reduce_sum(weights * divergence), tf.reduce_sum(weights))


def regularized_contexts(valid, best, current, regularize_below=None):
    """The mask m [k] of contexts whose stored edges the regulariser holds: valid contexts whose
    loss ``current`` rose above their ``best`` (the paper), and, with ``regularize_below``, only
    those already learned (``best < regularize_below``): edges stored before a context was
    learned are not worth keeping (the regulariser's cold start)."""
    m = tf.logical_and(valid, best < current)
    if regularize_below is not None:
        m = tf.logical_and(m, best < regularize_below)
    return m


def sampled_graph(log_k, noise, inverse_temperature):
    """Edge logits E = logit(k) and the raw training graph sigmoid((E + L) inverse_temperature)
    with the contexts' self-edges removed, from log k [k + T, k] (contexts first), the logistic
    noise L and the per-row inverse temperatures [k + T, 1]: ``(E, graph)``, both [k + T, k]."""
    logits = logit_of_exp(log_k)
    graph = tf.sigmoid((logits + noise) * inverse_temperature)
    return logits, tf.linalg.set_diag(graph, tf.zeros([log_k.shape[1]]))


def expected_graph(log_k):
    """``(E, sigmoid(E))`` with the contexts' self-edges removed: :func:`sampled_graph`'s
    deterministic counterpart (``stochastic_graphs: false``)."""
    logits = logit_of_exp(log_k)
    return logits, tf.linalg.set_diag(tf.sigmoid(logits), tf.zeros([log_k.shape[1]]))


def context_graph_regularizer(logits, stored_logits, regularized):
    """:func:`graph_regularizer` on the context rows of the edge logits [k + T, k]."""
    return graph_regularizer(logits[:logits.shape[1]], stored_logits, regularized)


# The same, compiled by XLA: a few fused loops over the [k, k] pairs instead of about thirty
# TensorFlow kernels (one pass over memory each), forward and backward. Only the regulariser:
# fusing the graph sampling gained nothing measurable, and XLA's CPU GEMMs and random numbers
# are slower than TensorFlow's (python -m gcl_tf.benchmark throughput measures both; see
# docs/performance.md).
context_graph_regularizer_fused = tf.function(context_graph_regularizer, jit_compile=True)


def replaced_source_index(slots, capacity: int):
    """Where each memory slot's new content comes from, after reservoir insertion.

    ``slots`` [T] (slot of target j, or -1). Returns ``(source [M], replaced [M] bool)`` with
    ``source[s] = s`` for a slot that keeps its context and ``M + j`` for a slot taken by target j.
    """
    t = tf.shape(slots)[0]
    stored = slots >= 0
    index = tf.boolean_mask(slots, stored)[:, None]  # [k, 1]
    targets = capacity + tf.boolean_mask(tf.range(t, dtype=tf.int32), stored)  # [k]
    source = tf.tensor_scatter_nd_update(tf.range(capacity, dtype=tf.int32), index, targets)
    replaced = tf.tensor_scatter_nd_update(tf.zeros([capacity], tf.bool), index, tf.ones_like(targets, tf.bool))
    return source, replaced


def update_edge_memory(stored, logits, target_logits, regularized, slots):
    """The context graph kept in memory after a step (docs/gcl.md, "Memory update after each step").

    ``stored`` [M, M] edge logits in memory; the current logits between all contexts (first M)
    and targets, in two blocks of columns: ``logits`` [M + T, M] to the contexts and
    ``target_logits`` [M + T, T] to the targets; ``regularized`` [M] bool (loss above the best);
    ``slots`` [T] reservoir slots of the targets (-1: not stored).
    - two surviving contexts: keep the stored logit where both are regularised, else current;
    - a new sample and a surviving context: the current target-context logit;
    - two new samples: the current target-target logit.
    One select over [M, M]; the (at most T) rows and columns of the new samples are gathered from
    the small blocks and scattered in.
    """
    capacity = stored.shape[0]
    T = slots.shape[0]
    both = tf.logical_and(regularized[:, None], regularized[None, :])
    kept = tf.where(both, stored, logits[:capacity])
    source, _ = replaced_source_index(slots, capacity)  # [M] index into the M + T images
    new = slots >= 0
    new_slots = tf.boolean_mask(slots, new)  # [r]
    targets = tf.boolean_mask(tf.range(T, dtype=tf.int32), new)  # [r]
    # Full rows [r, M + T] and columns [M + T, r] of the new samples, then read through source.
    rows = tf.concat([tf.gather(logits, capacity + targets), tf.gather(target_logits, capacity + targets)], axis=1)
    rows = tf.gather(rows, source, axis=1)  # [r, M]
    columns = tf.gather(tf.gather(target_logits, targets, axis=1), source)  # [M, r]
    kept = tf.tensor_scatter_nd_update(kept, new_slots[:, None], rows)
    at = tf.stack(tf.meshgrid(tf.range(capacity, dtype=tf.int32), new_slots, indexing="ij"), axis=-1)  # [M, r, 2]
    return tf.tensor_scatter_nd_update(kept, at, columns)


def average_log_probs(log_probs):
    """log of the mean of the sample distributions: logsumexp over axis 0 minus log S."""
    samples = tf.cast(tf.shape(log_probs)[0], log_probs.dtype)
    return tf.reduce_logsumexp(log_probs, axis=0) - tf.math.log(samples)


# ------------------------------------------------------------------------------ test-time noise
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


# ------------------------------------------------------------------------------ memory
class GraphMemory(ReservoirMemory):
    """Reservoir memory plus GCL's per-slot best context loss and its learned context graph:
    ``edge_logits`` [M, M] (``edge_memory="matrix"``) or ``edge_embeddings`` [M, H]
    (``"embeddings"``: linear memory, stored logits recomputed with the kernel)."""

    def __init__(self, capacity, image_shape, seed=0, edge_memory="matrix", embedding_size=None, name="memory"):
        super().__init__(capacity, image_shape, seed=seed, name=name)
        self.edge_memory = edge_memory
        with self.name_scope:
            self.best_loss = state_variable(tf.fill([capacity], math.inf), "best_loss")
            if edge_memory == "matrix":
                self.edge_logits = state_variable(tf.zeros([capacity, capacity]), "edge_logits")
            else:
                self.edge_embeddings = state_variable(tf.zeros([capacity, embedding_size]), "edge_embeddings")


# ------------------------------------------------------------------------------ model
class Method(ContinualModel):
    """GCL as a Keras model; ``train_step`` is the whole online update."""

    supports_distribution = True

    def __init__(self, config, input_shape, num_classes):
        super().__init__(config, input_shape, num_classes)
        cfg = config.method
        cfg.check(config)
        hidden = config.model.hidden_size
        self.hidden_size = hidden
        self.trunk = build_backbone(config.model, input_shape)
        self._per_image_trunk = not any(isinstance(layer, keras.layers.BatchNormalization)
                                        for layer in self.trunk._flatten_layers(include_self=False))
        feature_dim = self.trunk.output_shape[-1]
        # f_theta1 (edge head) and f_theta2 (latent head): ReLU is the trunk's last op.
        self.edge_head = keras.layers.Dense(hidden, name="edge_head")
        self.latent_head = keras.layers.Dense(hidden, name="latent_head")
        self.label_encoder = keras.layers.Dense(hidden, name="label_encoder")
        self.output_head = keras.layers.Dense(num_classes, name="output_head")  # f_theta3 on ReLU(Z)
        self.edge_head.build((None, feature_dim))
        self.latent_head.build((None, feature_dim))
        self.label_encoder.build((None, num_classes))
        self.output_head.build((None, 2 * hidden))
        # s in log k = -0.5 d^2 / exp(s); initialised to log sqrt(H) (the authors) or log kernel_width.
        width = cfg.kernel_width if cfg.kernel_width is not None else math.sqrt(hidden)
        self.kernel_log_scale = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(math.log(width)),
            name="kernel_log_scale", trainable=True,
        )
        self.memory = GraphMemory(cfg.memory_size, input_shape, seed=config.seed, edge_memory=cfg.edge_memory,
                                  embedding_size=hidden)
        self.capacity = cfg.memory_size
        # Contexts attended to per step: the whole memory, or context_batch of them.
        self.num_contexts = cfg.context_batch or cfg.memory_size
        # Test-time graph noise, drawn once per evaluation (see TestNoiseCache); one device only.
        noise_shape = (cfg.test_graph_samples, config.eval.batch_size, cfg.memory_size)
        use_cache = (cfg.stochastic_graphs and TestNoiseCache.fits(noise_shape)
                     and tf.distribute.get_strategy().num_replicas_in_sync == 1)
        self._test_noise = TestNoiseCache(noise_shape) if use_cache else None
        # The memory's embeddings, computed once per evaluation span (see ContextCache); one device only.
        one_device = tf.distribute.get_strategy().num_replicas_in_sync == 1
        self._contexts = ContextCache(cfg.memory_size, hidden, hidden + num_classes + 1) if one_device else None

    # -------------------------------------------------------------- building blocks
    def embed(self, images, training):
        """Trunk + heads: (u edge embeddings [N, H], l latent embeddings [N, H])."""
        features = self.trunk(images, training=training)
        return self.edge_head(features), self.latent_head(features)

    def embed_step(self, context_images, x):
        """:meth:`embed` (training mode) of the contexts then the targets   [k + T, H] each.

        A trunk that sees each image alone (no BatchNorm) runs on the two parts separately, so
        the memory's images go in as they are read, with no copy into a joint batch; a trunk with
        BatchNorm needs them in one batch (the statistics are over contexts and targets).
        """
        if self._per_image_trunk:
            features = tf.concat([self.trunk(context_images, training=True), self.trunk(x, training=True)], axis=0)
        else:
            features = self.trunk(tf.concat([context_images, x], axis=0), training=True)
        return self.edge_head(features), self.latent_head(features)

    def context_values(self, latents, labels, valid):
        """What the graphs aggregate: ``[l, one_hot(y), 1]`` of each context, 0 for invalid
        contexts   [k, H + K + 1].

        V of the paper is ``[l_context, LabelEncoder(one_hot(y_context))]`` [k, 2H]; since the
        label encoder is linear, :meth:`aggregate` computes ``normalised_graph @ V`` from the
        narrower ``graph @ [l, one_hot]``, and the last column gives the rows' sums (over valid
        contexts) that normalise them: one GEMM of width H + K + 1 does all of it.
        """
        values = tf.concat([latents, tf.one_hot(labels, self.num_classes), tf.ones_like(latents[:, :1])], axis=-1)
        return values * tf.cast(valid, values.dtype)[:, None]

    def aggregate(self, graph, values):
        """Z = normalised graph @ V   [rows, 2H], from the raw (unnormalised) graph.

        ``graph`` [..., k] (leading dims folded into one GEMM); invalid contexts are zero rows of
        ``values`` (:meth:`context_values`), so they neither count nor normalise. Rows are
        normalised after the GEMM (the same Z, a narrower pass), and
        ``graph @ (Y W + 1 b) = (graph @ Y) W + rowsum(graph) b`` for the label encoder (W, b).
        """
        flat = tf.reshape(graph, [-1, tf.shape(graph)[-1]])  # [rows, k]
        pooled = tf.matmul(flat, values)  # [rows, H + K + 1]
        H, K = self.hidden_size, self.num_classes
        # tf.split, not slices: its gradient is one concat (a slice's is a zero-filled copy each)
        latent, label_histogram, row_sum = tf.split(pooled, [H, K, 1], axis=1)  # [rows, H], [rows, K], [rows, 1]
        safe = tf.maximum(row_sum, ROW_EPS)
        latent, label_histogram = latent / safe, label_histogram / safe
        has_edges = tf.cast(row_sum > 0, latent.dtype)  # an empty row aggregates nothing
        label_code = tf.matmul(label_histogram, self.label_encoder.kernel) + has_edges * self.label_encoder.bias
        return tf.concat([latent, label_code], axis=-1)

    def classify(self, graph, values):
        """f_theta3(ReLU(Z)) -> logits [..., K]."""
        logits = self.output_head(tf.nn.relu(self.aggregate(graph, values)))
        return tf.reshape(logits, tf.concat([tf.shape(graph)[:-1], [self.num_classes]], 0))

    def call(self, x, training=False):
        """Logits of one test-time graph sample (``predict_log_probs`` averages many)."""
        return self.predict_log_probs(x, tf.ones([self.num_classes], tf.bool), samples=1)

    # -------------------------------------------------------------- training
    def select_contexts(self):
        """The memory slots attended to this step: ``(slots [k] int32, valid [k] bool)``.

        The whole memory (k = M, valid = filled), or ``context_batch`` slots drawn uniformly
        without replacement among the filled ones. Valid entries always come first.
        """
        filled = self.memory.filled()
        if self.num_contexts == self.capacity:
            return tf.range(self.capacity, dtype=tf.int32), filled
        seed = step_seed(self.seed, self.step_counter, SALT_CONTEXT_BATCH)
        return sample_without_replacement(filled, self.num_contexts, seed)

    def context_images(self, slots, valid, fallback=None):
        """Images of the context slots [k, ...]. Invalid entries repeat valid ones, or the
        ``fallback`` images while nothing is valid (the first batch), so that BatchNorm statistics
        are computed on real images; invalid contexts are masked out of the graphs. (One gather and
        no other pass over the images; for the whole memory in slot order not even that.)"""
        k = slots.shape[0]
        num_valid = tf.reduce_sum(tf.cast(valid, tf.int32))
        source = tf.gather(slots, tf.math.floormod(tf.range(k), tf.maximum(num_valid, 1)))  # slots once all valid
        memory = self.memory.images
        if k == self.capacity:  # all valid, in slot order (select_contexts on the whole memory): a plain read
            in_order = tf.reduce_all(tf.equal(source, tf.range(k, dtype=source.dtype)))
            images = tf.cond(in_order, memory.read_value, lambda: tf.gather(memory, source))
        else:
            images = tf.gather(memory, source)
        if fallback is None:
            return images
        tiled = tf.gather(fallback, tf.math.floormod(tf.range(k), fallback.shape[0]))
        return tf.cond(num_valid > 0, lambda: images, lambda: tiled)  # picks one, copies nothing

    def _context_images(self):
        """All M memory images (unfilled slots repeat filled ones)."""
        return self.context_images(tf.range(self.capacity, dtype=tf.int32), self.memory.filled())

    def training_noise(self, k, T, seed):
        """The logistic noise of one training graph [k + T, k].

        On R replicas it is drawn for the global batch (k + R T rows) and each replica takes the
        rows of its own targets: the graphs of a single-device run, sliced.
        """
        replicas = num_replicas()
        noise = logistic_noise([k + replicas * T, k], seed)  # [k + R T, k]
        if replicas > 1:
            rows = tf.concat([tf.range(k), k + replica_id() * T + tf.range(T)], axis=0)
            noise = tf.gather(noise, rows)
        return noise

    def sample_training_graph(self, log_k, seed):
        """Edge logits E and one relaxed-Bernoulli sample of the raw training graph, from the log
        kernel [k + T, k] (rows: contexts (G), then targets (A)), with the context and target
        temperatures: ``(E, graph)`` [k + T, k], the contexts' self-edges removed, not masked,
        not normalised."""
        cfg = self.method_config
        k = log_k.shape[1]
        T = log_k.shape[0] - k
        if not cfg.stochastic_graphs:
            return expected_graph(log_k)
        inverse_temperature = tf.concat(
            [tf.fill([k, 1], 1.0 / cfg.context_temperature), tf.fill([T, 1], 1.0 / cfg.target_temperature)], axis=0
        )  # [k + T, 1]
        return sampled_graph(log_k, self.training_noise(k, T, seed), inverse_temperature)

    def training_graph(self, log_k, valid, seed):
        """The sampled training graph as the paper writes it: self-edges of contexts and invalid
        contexts removed, rows normalised [k + T, k]. (The step itself aggregates the sample
        and normalises after the GEMM, :meth:`aggregate`: the same Z.)"""
        return normalize_rows(self.sample_training_graph(log_k, seed)[1], valid[None, :])

    def stored_edge_logits(self, slots):
        """The stored context-graph logits between the context slots [k, k] (no gradient)."""
        memory = self.memory
        if memory.edge_memory == "matrix":
            if self.num_contexts == self.capacity:
                return memory.edge_logits.read_value()
            return tf.gather(tf.gather(memory.edge_logits, slots), slots, axis=1)
        stored = tf.gather(memory.edge_embeddings, slots)  # [k, H]
        return tf.stop_gradient(edge_logits(stored, stored, self.kernel_log_scale))

    def training_forward(self, x, y, slots=None, valid=None):
        """The differentiable part of a step (run it under a GradientTape).

        ``slots, valid`` are the contexts (default: :meth:`select_contexts`). Returns the loss,
        its terms, the edge embeddings ``u`` [k + T, H] and logits between all images
        [k + T, k + T] (contexts first), the per-context cross-entropies [k] and the
        regularised-context mask m [k].
        """
        cfg = self.method_config
        if slots is None:
            slots, valid = self.select_contexts()
        k = slots.shape[0]
        context_labels = tf.gather(self.memory.labels, slots)
        seed = step_seed(self.seed, self.step_counter, SALT_TRAIN_GRAPH)
        u, latents = self.embed_step(self.context_images(slots, valid, fallback=x), x)  # [k + T, H] each
        rows, cols = kernel_factors(u, self.kernel_log_scale)  # [k + T, H + 2] each
        context_cols, target_cols = tf.split(cols, [k, x.shape[0]])  # (splits: their gradient is one concat)
        log_k = tf.matmul(rows, context_cols, transpose_b=True)  # [k + T, k]: G then A
        logits_e, graph = self.sample_training_graph(log_k, seed)  # E and the raw sample, no self-edges
        values = self.context_values(tf.split(latents, [k, x.shape[0]])[0], context_labels, valid)  # [k, H + K + 1]
        out = self.classify(graph, values)  # [k + T, K]
        context_out, target_out = tf.split(out, [k, x.shape[0]])
        context_ce = cross_entropy(context_labels, context_out)  # [k]
        target_ce = cross_entropy(y, target_out)  # [T]
        valid_f = tf.cast(valid, tf.float32)
        num_valid = tf.maximum(tf.reduce_sum(valid_f), 1.0)
        context_loss = tf.reduce_sum(context_ce * valid_f) / num_valid
        target_loss = tf.reduce_mean(target_ce)
        best = tf.gather(self.memory.best_loss, slots)
        regularized = regularized_contexts(valid, best, tf.stop_gradient(context_ce), cfg.regularize_below)  # m_i
        regularizer = context_graph_regularizer_fused if cfg.fuse_regularizer else context_graph_regularizer
        graph_loss = regularizer(logits_e, self.stored_edge_logits(slots), regularized)
        context_terms = cfg.context_lambda * context_loss + cfg.graph_lambda * graph_loss
        loss = target_loss + context_terms
        # Gradients are summed over replicas: each weighs its targets by its share of the global
        # batch and the (replicated) context terms by 1 / R.
        # The first batch only fills the memory: with no context to attend to, nothing is learned.
        learning = tf.cast(tf.reduce_any(valid), tf.float32)
        replicas = num_replicas()
        return {
            "loss": loss * learning,
            "replica_loss": learning * (target_loss + context_terms) / replicas,
            "target_loss": target_loss * learning,
            "context_loss": context_loss,
            "graph_loss": graph_loss,
            "regularized_fraction": tf.reduce_sum(tf.cast(regularized, tf.float32)) / num_valid,
            "embeddings": u,
            "kernel_log_scale": tf.identity(self.kernel_log_scale),  # as read before the update
            # logits between all images for the edge memory (no gradient), in two blocks of
            # columns: to the contexts [k + T, k] and to the targets [k + T, T]
            "edge_logits": logits_e,
            "target_edge_logits": logit_of_exp(tf.matmul(rows, target_cols, transpose_b=True)),
            "context_ce": context_ce,
            "regularized": regularized,
        }

    _LOGGED = ("loss", "target_loss", "context_loss", "graph_loss", "regularized_fraction")

    def learn(self, x, y):
        memory = self.memory
        slots, valid = self.select_contexts()  # [k]
        replicas = num_replicas()
        # Under a strategy every replica must launch its collectives in the same order: the
        # global batch is gathered first, the gradients are reduced, then the memory inputs.
        stream_x, stream_y = gather_in_order(x, y)  # the global batch, for the memory
        # One path for every step, no tf.cond around the optimizer (under a tf.distribute
        # strategy it must not sit in control flow): the first batch has no valid context and a
        # zero loss, so it only fills the memory.
        with tf.control_dependencies([stream_x, stream_y]), tf.GradientTape() as tape:
            out = self.training_forward(x, y, slots, valid)
        self.apply_gradients(tape, out["replica_loss"])
        logs = {name: out[name] for name in self._LOGGED}
        embeddings = tf.stop_gradient(out["embeddings"])
        logits, target_logits = tf.stop_gradient(out["edge_logits"]), tf.stop_gradient(out["target_edge_logits"])
        context_ce, regularized = tf.stop_gradient(out["context_ce"]), out["regularized"]
        best = tf.gather(memory.best_loss, slots)
        x, y = stream_x, stream_y
        if replicas > 1:  # every replica applies the same update, from the global batch
            k = slots.shape[0]
            with tf.control_dependencies([self.optimizer.iterations.value]):  # after the update
                shared = all_mean(tf.concat([context_ce[:, None], embeddings[:k]], axis=1))  # [k, 1 + H]
            with tf.control_dependencies([shared]):
                target_embeddings = all_gather(embeddings[k:])  # [R T, H]
            context_ce = shared[:, 0]
            regularized = regularized_contexts(valid, best, context_ce, self.method_config.regularize_below)
            embeddings = tf.concat([shared[:, 1:], target_embeddings], axis=0)
            scale = tf.stop_gradient(out["kernel_log_scale"])  # the forward pass's, not the updated one
            all_logits = edge_logits(embeddings, embeddings, scale)  # [k + R T, k + R T]
            logits, target_logits = all_logits[:, :k], all_logits[:, k:]
        # Best context losses: min with this step's, for the contexts attended to.
        scatter_update(memory.best_loss, slots[:, None], tf.where(valid, tf.minimum(best, context_ce), best))
        # Reservoir insertion of the targets, with the edge memory and the reset of the best
        # loss of replaced slots.
        new_slots = memory.reservoir_slots(x.shape[0])  # [T], -1: not stored
        if memory.edge_memory == "matrix":
            memory.edge_logits.assign(update_edge_memory(memory.edge_logits, logits, target_logits, regularized,
                                                       new_slots))
        else:
            self._update_edge_embeddings(embeddings, slots, valid, regularized, new_slots)
        _, replaced = replaced_source_index(new_slots, self.capacity)
        memory.best_loss.assign(tf.where(replaced, math.inf, memory.best_loss))
        memory.write(new_slots, x, y)
        return logs

    def _update_edge_embeddings(self, embeddings, slots, valid, regularized, new_slots):
        """Linear edge memory: a context at a new low stores its current edge embedding; a new
        sample stores its own (the rules of the matrix store, per slot instead of per pair)."""
        k = slots.shape[0]
        refresh = tf.logical_and(valid, tf.logical_not(regularized))  # [k]
        scatter_update(self.memory.edge_embeddings, tf.boolean_mask(slots, refresh)[:, None],
                       tf.boolean_mask(embeddings[:k], refresh))
        stored = new_slots >= 0
        scatter_update(self.memory.edge_embeddings, tf.boolean_mask(new_slots, stored)[:, None],
                       tf.boolean_mask(embeddings[k:], stored))

    # -------------------------------------------------------------- prediction
    def memory_contexts(self):
        """What predictions attend to: the memory's edge embeddings [M, H] and the values
        :meth:`aggregate` reads [M, H + K + 1] (test-mode trunk on all M memory images)."""
        u_c, l_c = self.embed(self._context_images(), training=False)  # [M, H]
        return u_c, self.context_values(l_c, self.memory.labels, self.memory.filled())

    def begin_evaluation(self) -> None:
        if self._contexts is not None:
            self._contexts.open()

    def end_evaluation(self) -> None:
        if self._contexts is not None:
            self._contexts.close()

    def predict_log_probs(self, x, class_mask, samples=None, seed=None):
        """log p(y | x, memory) averaged over ``samples`` test-time graphs   [N, K].

        V (and the context embeddings) are computed once per call, not once per sample, and
        inside an evaluation scope once per scope (ContextCache).
        """
        cfg = self.method_config
        samples = cfg.test_graph_samples if samples is None else samples
        if not cfg.stochastic_graphs:
            samples = 1
        # The caches serve the evaluation's own predictions; an explicit seed (serving) computes afresh.
        own = seed is None
        cached = own and self._test_noise is not None and (samples, x.shape[0]) == self._test_noise.shape[:2]
        if own:
            seed = step_seed(self.seed, self.step_counter, SALT_TEST_GRAPH)
        if own and self._contexts is not None:
            u_c, values = self._contexts.get(self.memory_contexts)
        else:
            u_c, values = self.memory_contexts()
        u_t, _ = self.embed(x, training=False)  # [N, H]
        logits_e = edge_logits(u_t, u_c, self.kernel_log_scale)  # [N, M]
        replicas = num_replicas()
        if not cfg.stochastic_graphs:
            noise = None
        elif replicas == 1 and cached:
            noise = self._test_noise.get(seed)
        elif replicas == 1:
            noise = logistic_noise(tf.concat([[samples], tf.shape(logits_e)], 0), seed)  # as sample_graph draws it
        else:  # this replica's rows of the global batch's noise, as on one device
            n = x.shape[0]
            noise = logistic_noise([samples, replicas * n, self.capacity], seed)
            noise = tf.gather(noise, replica_id() * n + tf.range(n), axis=1)
        if noise is None:
            logits = self.classify(tf.sigmoid(logits_e)[None], values)  # [1, N, K]
        else:  # one graph sample at a time: its [N, M] graph stays in cache through the GEMM
            logits = tf.map_fn(lambda eps: self.classify(relaxed_bernoulli(logits_e, cfg.test_temperature, eps), values),
                               noise, parallel_iterations=4, fn_output_signature=tf.float32)  # [S, N, K]
        log_probs = tf.nn.log_softmax(mask_logits(logits, class_mask), axis=-1)
        return average_log_probs(log_probs)

    # -------------------------------------------------------------- artifacts for the figures
    def context_graph(self):
        """The expected context graph ``sigmoid(E)`` between the filled memory slots, self-edges
        removed, and the slots' labels: ``(graph [C, C], labels [C])`` as numpy (None if empty)."""
        import numpy as np

        filled = int(self.memory.num_filled.numpy())
        if filled == 0:
            return None
        chunk = max(1, int(self.config.eval.batch_size))
        u = tf.concat([self.embed(self.memory.images[i:min(i + chunk, filled)], training=False)[0]
                       for i in range(0, filled, chunk)], axis=0)  # [C, H]
        graph = tf.sigmoid(edge_logits(u, u, self.kernel_log_scale)).numpy()  # [C, C]
        np.fill_diagonal(graph, 0.0)
        return graph, self.memory.labels[:filled].numpy()

    def penultimate(self, x):
        """ReLU(Z), what the output head reads, with the expected test graph (Bernoulli means,
        row-normalised) from ``x`` to the memory   [N, 2H]."""
        u_c, l_c = self.embed(self._context_images(), training=False)  # [M, H]
        u_t, _ = self.embed(x, training=False)  # [N, H]
        graph = tf.sigmoid(edge_logits(u_t, u_c, self.kernel_log_scale))  # [N, M]
        return tf.nn.relu(self.aggregate(graph, self.context_values(l_c, self.memory.labels, self.memory.filled())))

    def output_layer(self):
        return self.output_head
