"""GCL: Graph-Based Continual Learning (Tang & Matteson, ICLR 2021): the Keras model.

The episodic memory holds context images and labels (reservoir sampling, task-free) and the
logits of the context graph G learned so far. Each step embeds contexts and targets with a
shared trunk and two heads, builds Bernoulli edge logits from an RBF kernel with a learned
scale, samples one relaxed graph (context rows: G, target rows: A), aggregates the contexts'
latent and label embeddings along its normalised rows, and classifies the result. The loss adds
a graph regulariser: contexts whose loss rose above their best keep their stored edges.

Shapes: ``M`` memory capacity (always ``[M, ...]`` with a fill mask), ``T`` targets per batch,
``H`` hidden size, ``K`` classes. Notation follows docs/gcl.md.

This module holds the model's construction, its memory estimate and its building blocks
(embeddings, aggregation, classification, the contexts' images); its training step is
:class:`~gcl_tf.methods.gcl.training.Training`'s and its predictions and evaluation caches are
:class:`~gcl_tf.methods.gcl.prediction.Prediction`'s, mixed in.
"""
from __future__ import annotations

import math

import keras
import tensorflow as tf

from gcl_tf.backbones import feature_size, mlp
from gcl_tf.memory import GraphMemory, state_variable
from gcl_tf.methods.base import ContinualModel
from gcl_tf.methods.gcl.caches import ContextCache
from gcl_tf.methods.gcl.config import Config as GCLConfig
from gcl_tf.methods.gcl.graph import (
    ROW_EPS,
    normalize_embeddings,
)
from gcl_tf.methods.gcl.prediction import Prediction
from gcl_tf.methods.gcl.training import Training
from gcl_tf.methods.hooks import FLOAT32
from gcl_tf.precision import float32

STEP_GRAPH_TENSORS = 3  # kernel, edge logits, sampled graph: [k + B, k] each, all alive for the gradient


class GCL(Training, Prediction, ContinualModel):
    """GCL as a Keras model; ``train_step`` is the whole online update.

    ``backbone``: the shared trunk (images -> non-negative features, e.g. ending in a ReLU; None:
    the paper's MLP of two ``hidden_size`` ReLU layers); ``hidden_size``: H, the width of the
    edge, latent and label embeddings. The other keywords are the method's keys, with the
    defaults and meaning of :class:`Config`; see
    :class:`~gcl_tf.methods.base.ContinualModel` for the common ones (``eval_batch_size`` sizes
    the test-time noise cache, drawn once per evaluation).
    """

    Config = GCLConfig
    settings: GCLConfig

    style = ("#d62728", "*")  # red: the paper's method
    supports_distribution = True
    test_settings = {"memory_size": 20, "test_graph_samples": 3}
    tune_grid = {"method.graph_lambda": [0.0, 10.0, 50.0, 100.0, 1000.0, 5000.0],  # graph regularization
                 "method.context_temperature": [0.1, 0.3, 1.0, 5.0, 10.0],
                 "method.target_temperature": [0.1, 0.3, 1.0, 5.0, 10.0]}

    def __init__(self, backbone=None, *, num_classes, hidden_size=256, **keys):
        super().__init__(backbone, num_classes=num_classes, **keys)
        s = self.settings
        hidden = int(hidden_size)
        self.hidden_size = hidden
        self.trunk = mlp(self.image_shape, hidden) if backbone is None else backbone
        self._per_image_trunk = not any(isinstance(layer, keras.layers.BatchNormalization)
                                        for layer in self.trunk._flatten_layers(include_self=False))
        feature_dim = feature_size(self.trunk, self.image_shape)
        num_classes = self.num_classes
        # f_theta1 (edge head) and f_theta2 (latent head): ReLU is the trunk's last op.
        self.edge_head = keras.layers.Dense(hidden, name="edge_head")
        self.latent_head = keras.layers.Dense(hidden, name="latent_head")
        self.label_encoder = keras.layers.Dense(hidden, name="label_encoder")
        self.output_head = keras.layers.Dense(num_classes, name="output_head")  # f_theta3 on ReLU(Z)
        self.edge_head.build((None, feature_dim))
        self.latent_head.build((None, feature_dim))
        self.label_encoder.build((None, num_classes))
        self.output_head.build((None, 2 * hidden))
        # own_latent: the head's weights on ReLU(l) of the image itself (no bias: output_head has it).
        self.own_head = keras.layers.Dense(num_classes, use_bias=False, name="own_head") if s.own_latent else None
        if self.own_head is not None:
            self.own_head.build((None, hidden))
        # s in log k = -0.5 d^2 / exp(s); initialised to log kernel_width (null: log sqrt(H), the
        # authors'; median: sqrt(H) until the first step with contexts sets it from the median
        # squared distance, :func:`median_kernel_width`).
        width = math.sqrt(hidden) if s.kernel_width is None or self.width_from_median else float(s.kernel_width)
        self.kernel_log_scale = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(math.log(width)),
            name="kernel_log_scale", trainable=True,
        )
        # Whether the median heuristic has set the kernel's width (saved: a resumed run keeps it).
        self.kernel_width_set = state_variable(tf.constant(False), "kernel_width_set")
        self.memory = GraphMemory(s.memory_size, self.image_shape, seed=self.seed, edge_memory=s.edge_memory,
                                  embedding_size=hidden)
        self._test_noise = None
        self._warned_of_task = None  # the task after which GCL said it did not learn (on_task_end)
        if self.eval_batch_size is not None:
            self.prepare_test_noise(self.eval_batch_size)
        # The memory's embeddings, computed once per evaluation span (see ContextCache); one device only.
        one_device = tf.distribute.get_strategy().num_replicas_in_sync == 1
        self._contexts = ContextCache(self.capacity, hidden, hidden + num_classes + 1) if one_device else None

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size}

    @property
    def capacity(self) -> int:
        """M, the memory's samples (``memory_size``)."""
        return self.settings.memory_size

    @property
    def num_contexts(self) -> int:
        """Contexts attended to per step: the whole memory, or ``context_batch`` of them."""
        return self.settings.context_batch or self.settings.memory_size

    @property
    def width_from_median(self) -> bool:
        """Whether the kernel's width is set by the median heuristic (``kernel_width: median``)."""
        return self.settings.kernel_width == "median"

    # -------------------------------------------------------------- the memory estimate
    @classmethod
    def memory_buffers(cls, config) -> list:
        """The learned context graph ([M, M] edge logits, or [M, H] edge embeddings), the graphs of
        a training step ([k + V B, k] for k contexts and V views of B targets: the kernel, the edge
        logits and the sampled graph, all kept for the gradient) and the test-time graph noise
        ([S, N, M]: drawn for each evaluation batch, kept when it fits TEST_NOISE_CACHE_BYTES), in bytes."""
        method, memory, hidden = config.method, int(config.method.memory_size), int(config.model.hidden_size)
        if method.edge_memory == "matrix":
            graph = (f"the [{memory}, {memory}] edge matrix", memory * memory * FLOAT32)
        else:
            graph = (f"the [{memory}, {hidden}] edge embeddings", memory * hidden * FLOAT32)
        k = method.context_batch or memory
        rows, n = k + int(config.train.batch_size) * method.target_views, STEP_GRAPH_TENSORS
        buffers = [graph, (f"a training step's graphs ({n} x [{rows}, {k}])", n * rows * k * FLOAT32)]
        if method.draws_test_noise:
            shape = (int(method.test_graph_samples), int(config.eval.batch_size), memory)
            buffers.append((f"the test graphs' noise [{', '.join(map(str, shape))}]", math.prod(shape) * FLOAT32))
        return buffers

    @classmethod
    def memory_advice(cls, config) -> str:
        method = config.method
        if method.edge_memory == "matrix":
            return ("set method.edge_memory: embeddings with method.context_batch (e.g. 1000), which make the graph "
                    "linear in the memory, or lower method.memory_size")
        if method.context_batch is None:
            return "set method.context_batch (e.g. 1000) or lower method.memory_size"
        return "lower method.context_batch, eval.batch_size or method.memory_size"

    # -------------------------------------------------------------- building blocks
    def embed(self, images, training):
        """Trunk + heads: (u edge embeddings [N, H], l latent embeddings [N, H]), in float32 (the
        layers compute under train.mixed_precision's policy; the graph math takes float32)."""
        features = self.trunk(images, training=training)
        return self.edge_embeddings(features), float32(self.latent_head(features))

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
        return self.edge_embeddings(features), float32(self.latent_head(features))

    def edge_embeddings(self, features):
        """The edge head's embeddings u the kernel compares   [N, H] (float32): as the head gives
        them (``kernel: rbf``, the paper) or on the unit sphere (``kernel: normalized``)."""
        u = float32(self.edge_head(features))
        return normalize_embeddings(u) if self.settings.kernel == "normalized" else u

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

    def classify(self, graph, values, own=None):
        """f_theta3(ReLU(Z)) -> logits [..., rows, K], plus ``own`` [rows, K] (:meth:`own_logits`
        of the rows' images, with ``own_latent``; None: nothing added)."""
        logits = float32(self.output_head(tf.nn.relu(self.aggregate(graph, values))))
        logits = tf.reshape(logits, tf.concat([tf.shape(graph)[:-1], [self.num_classes]], 0))
        return logits if own is None else logits + own

    @property
    def own_latent(self) -> bool:
        """Whether the head also reads each image's own latent embedding (``own_latent``)."""
        return self.own_head is not None

    def own_logits(self, latents):
        """``own_latent``: the head's term from each image's own latent embedding, W_own ReLU(l)
        [N, K] (added to every graph sample's logits); None without it."""
        return None if self.own_head is None else float32(self.own_head(tf.nn.relu(latents)))

    def call(self, x, training=False):
        """Logits of one test-time graph sample (``predict_log_probs`` averages many)."""
        return self.predict_log_probs(x, tf.ones([self.num_classes], tf.bool), samples=1)

    # -------------------------------------------------------------- the memory's images
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
