"""GCL's graph math as small pure functions (docs/gcl.md): the RBF kernel and its Bernoulli edge
logits, relaxed-Bernoulli graph samples, row normalisation, the graph regulariser, the edge
memory's update rule and the average of per-sample predictions. No state, no Keras.
"""
from __future__ import annotations

import math

import tensorflow as tf
import tensorflow_probability as tfp

tfd = tfp.distributions

ROW_EPS = 1e-12  # guards the L1 normalisation of an all-zero row
MASKED_LOGIT = -1e9  # a class left out of a row's softmax (methods.base.NEG_INF's value; this module stays Keras-free)
LOG_KERNEL_MAX = -1e-6  # log k is clipped below 0 so that logit(k) stays finite


def squared_distances(a, b):
    """||a_i - b_j||^2 for a [N, D], b [P, D] -> [N, P] (clamped at 0 against round-off)."""
    a2 = tf.reduce_sum(tf.square(a), axis=1, keepdims=True)  # [N, 1]
    b2 = tf.reduce_sum(tf.square(b), axis=1)[None, :]  # [1, P]
    return tf.maximum(a2 + b2 - 2.0 * tf.matmul(a, b, transpose_b=True), 0.0)


def median_squared_distance(u, valid):
    """The median of ``||u_i - u_j||^2`` over the pairs i != j of valid rows of ``u`` [k, H]
    (``valid`` [k] bool), 0 with under two valid rows: the median heuristic's scale, from which
    :func:`median_kernel_width` sets the kernel's width."""
    d2 = squared_distances(u, u)  # [k, k]
    k = tf.shape(u)[0]
    pairs = tf.logical_and(tf.logical_and(valid[:, None], valid[None, :]), tf.logical_not(tf.eye(k, dtype=tf.bool)))
    values = tf.boolean_mask(d2, pairs)
    return tf.cond(tf.size(values) > 0,
                   lambda: tfp.stats.percentile(values, 50.0, interpolation="midpoint"),
                   lambda: tf.constant(0.0, d2.dtype))


def median_kernel_width(median, edge):
    """The kernel width at which a pair of contexts at the ``median`` squared distance has edge
    probability ``edge``: exp(-0.5 median / w) = edge, w = median / (-2 log edge)."""
    return median / (-2.0 * math.log(edge))


NORM_EPS = 1e-12  # guards the L2 normalisation of an all-zero embedding (it stays 0)


def normalize_embeddings(u):
    """The edge embeddings on the unit sphere, ``u_i / ||u_i||``  [N, H] (``method.kernel:
    normalized``): their squared distances are ``2 - 2 cos(u_i, u_j)``, in [0, 4] whatever the
    trunk's scale, so the kernel's width means the same with every trunk and stays meaningful
    while the trunk's embeddings grow. An all-zero row stays 0 (its norm is guarded by NORM_EPS)."""
    return tf.math.l2_normalize(u, axis=1, epsilon=NORM_EPS)  # u * rsqrt(max(|u|^2, eps))


NO_EDGE_MASS = 1e-6  # a row whose edge probabilities sum below this reaches (almost) nothing


def neighbourhoods(graph, no_edge_mass: float = NO_EDGE_MASS):
    """How far the rows of ``graph`` [N, C] (numpy edge probabilities from N images to C memory
    images) reach: ``(no_edge, spread)``. ``no_edge`` is the share of rows whose probabilities sum
    below ``no_edge_mass``: the row normalisation then leaves them almost nothing to aggregate.
    ``spread`` is the median over rows of the effective number of neighbours, exp(entropy of the
    normalised row), as a share of C: near 1 when a row weighs every memory image alike and so
    sees only the memory's average. Small probabilities alone are no fault: normalised, a row of
    edges all below 0.01 can still single out its nearest neighbours."""
    import numpy as np

    graph = np.asarray(graph, dtype=np.float64)
    if graph.size == 0:
        return 0.0, 0.0
    mass = graph.sum(axis=1)
    weights = graph / np.maximum(mass, np.finfo(np.float64).tiny)[:, None]
    entropy = -np.sum(np.where(weights > 0, weights * np.log(np.where(weights > 0, weights, 1.0)), 0.0), axis=1)
    return float(np.mean(mass < no_edge_mass)), float(np.median(np.exp(entropy)) / graph.shape[1])


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


def graph_regularizer(current_logits, stored_logits, regularized, self_pairs: bool = True):
    """The graph regulariser L_G over the regularised context pairs.

    ``current_logits, stored_logits`` [M, M]; ``regularized`` [M] bool (contexts whose loss is
    above their best). Mean over the entries (i, k) with both ends regularised (the whole held
    block, each context's pair with itself included: the paper's p(G) is over every i, k in C, and
    the authors average over that block; ``self_pairs=False``: the pairs i != k only) of the
    Bernoulli cross-entropy between the stored edge probabilities and the current ones, minus
    the (constant) entropy of the stored ones: the KL divergence, which has the cross-entropy's
    gradient and is 0 when nothing was forgotten. 0 when no pair is regularised. Stored edges
    get no gradient. (A self-pair adds about 0: both logits are logit(k(u, u)) = logit(1), clipped,
    and get no gradient there; what it changes is the count: with m contexts held, the mean over
    m^2 entries instead of m (m - 1).)
    """
    pairs = tf.logical_and(regularized[:, None], regularized[None, :])
    if not self_pairs:
        pairs = tf.logical_and(pairs, tf.logical_not(tf.eye(tf.shape(regularized)[0], dtype=tf.bool)))
    weights = tf.cast(pairs, current_logits.dtype)
    stored_logits = tf.stop_gradient(stored_logits)
    targets = tf.sigmoid(stored_logits)
    cross_entropy_ = tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=current_logits)
    entropy = tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=stored_logits)
    divergence = cross_entropy_ - entropy  # [M, M]
    return tf.math.divide_no_nan(tf.reduce_sum(weights * divergence), tf.reduce_sum(weights))


def regularized_contexts(valid, best, current, regularize_below=None, carrying=None):
    """The mask m [k] of contexts whose stored edges the regulariser holds: valid contexts whose
    loss ``current`` rose above their ``best`` (the paper), and, with ``regularize_below``, only
    those already learned (``best < regularize_below``): edges stored before a context was
    learned are not worth keeping (the regulariser's cold start); with ``carrying`` [k] bool
    (:func:`label_carrying_contexts`), only those whose stored edges carry their label."""
    m = tf.logical_and(valid, best < current)
    if regularize_below is not None:
        m = tf.logical_and(m, best < regularize_below)
    if carrying is not None:
        m = tf.logical_and(m, carrying)
    return m


def label_carrying_contexts(stored_logits, labels, valid, exponent):
    """[k] bool: the valid contexts whose stored edges carry their label (``regularize_selective``).

    ``stored_logits`` [k, k] the stored context-graph logits, ``labels`` [k], ``valid`` [k] bool.
    Context i's vote along its stored edges to the other valid contexts, p_i = sum_j
    sigmoid(E_ij) [y_j = y_i] / sum_j sigmoid(E_ij), is compared with what a graph weighing them
    alike gives, s_i, the share of the other valid contexts of its class: it carries its label
    when p_i >= s_i ** exponent, i.e. the vote's cross-entropy -log p_i is at most ``exponent``
    times the uniform graph's -log s_i (exponent 0.5: half of chance's nats gained). A context with
    no other of its class carries nothing.
    """
    k = tf.shape(labels)[0]
    others = tf.logical_and(tf.logical_and(valid[:, None], valid[None, :]),
                            tf.logical_not(tf.eye(k, dtype=tf.bool)))
    same = tf.logical_and(others, tf.equal(labels[:, None], labels[None, :]))
    weights = tf.sigmoid(tf.stop_gradient(stored_logits)) * tf.cast(others, stored_logits.dtype)
    vote = tf.math.divide_no_nan(tf.reduce_sum(weights * tf.cast(same, weights.dtype), axis=1),
                                 tf.reduce_sum(weights, axis=1))
    share = tf.math.divide_no_nan(tf.reduce_sum(tf.cast(same, weights.dtype), axis=1),
                                  tf.reduce_sum(tf.cast(others, weights.dtype), axis=1))
    return tf.logical_and(tf.logical_and(valid, share > 0), vote >= share ** exponent)


def replica_noise_rows(k: int, per_view: int, views: int, replicas, replica):
    """The rows of the global batch's training noise [k + R V T, k] that replica ``replica`` of
    ``replicas`` takes for its k contexts and its V views of T targets: the contexts' rows, then in
    each view its own targets' rows, laid out as a single-device run lays out the global batch
    (contexts, then view 1 of all R T targets, then view 2): [k + V T] int32."""
    views_first = tf.range(views)[:, None] * replicas * per_view + replica * per_view  # [V, 1]
    targets = k + tf.reshape(views_first + tf.range(per_view)[None, :], [-1])  # [V T]
    return tf.concat([tf.range(k), targets], axis=0)


def without_self_edges(graph):
    """``graph`` [k + T, k] (contexts first) with each context's edge to itself set to 0."""
    return tf.linalg.set_diag(graph, tf.zeros([graph.shape[1]], graph.dtype))


def sampled_graph(log_k, noise, inverse_temperature):
    """Edge logits E = logit(k) and the raw training graph sigmoid((E + L) inverse_temperature)
    with the contexts' self-edges removed, from log k [k + T, k] (contexts first), the logistic
    noise L and the per-row inverse temperatures [k + T, 1]: ``(E, graph)``, both [k + T, k]."""
    logits = logit_of_exp(log_k)
    return logits, without_self_edges(tf.sigmoid((logits + noise) * inverse_temperature))


def expected_graph(log_k):
    """``(E, sigmoid(E))`` with the contexts' self-edges removed: :func:`sampled_graph`'s
    deterministic counterpart (``stochastic_graphs: false``)."""
    logits = logit_of_exp(log_k)
    return logits, without_self_edges(tf.sigmoid(logits))


def vote_cross_entropy(logits_e, context_labels, row_labels, class_mask=None):
    """Each row's cross-entropy of the memory's label vote along the expected graph sigmoid(E), from
    the edge logits E [k + T, k] the step has already computed (contexts first, their self-edges
    left out, as :func:`expected_graph` does)   [k + T].

    ``context_labels`` [k, K] the contexts' one-hot labels (zero rows for invalid contexts, which
    vote for nothing), ``row_labels`` [k + T] int the rows' labels. Its gradient moves the edge
    embeddings so that an image's edges weigh the memory's images of its class (the vote's
    log-likelihood, :func:`label_vote_logits`; ``vote_lambda``). ``class_mask`` [k + T, K] bool: the
    classes each row's vote is among (None: every class; ``vote_targets: present``)."""
    logits = label_vote_logits(without_self_edges(tf.sigmoid(logits_e)), context_labels)
    if class_mask is not None:
        logits = tf.where(class_mask, logits, MASKED_LOGIT)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(row_labels, tf.int32), logits=logits)


def context_graph_regularizer(logits, stored_logits, regularized, self_pairs: bool = True):
    """:func:`graph_regularizer` on the context rows of the edge logits [k + T, k]."""
    return graph_regularizer(logits[:logits.shape[1]], stored_logits, regularized, self_pairs)


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


def label_vote_logits(graph, labels):
    """The memory's labels weighted by the test graph, as logits: ``log(graph @ labels)``   [N, K].

    ``graph`` [N, M] edge weights (the expected graph, sigmoid(E)), ``labels`` [M, K] the memory's
    one-hot labels (zero rows for empty slots). Their softmax is the kernel-weighted
    nearest-neighbour vote p(y | x) = sum_j g_xj [y_j = y] / sum_j g_xj; a row with no edge
    (or the classes it reaches none of) gets log ROW_EPS, so that no edge at all votes uniformly.
    """
    return tf.math.log(tf.matmul(graph, labels) + ROW_EPS)


NCM_TEMPERATURE = 0.1  # the nearest-class-mean logits' scale: cosines / 0.1 (argmax unchanged by it)


def class_mean_logits(latents, memory_latents, memory_labels, temperature: float = NCM_TEMPERATURE):
    """The nearest-class-mean classifier on the memory (``test_prediction: ncm``): each class's mean of
    the memory's L2-normalised features, normalised again, and the cosine of each image's normalised
    features with it, over ``temperature``   [N, K].

    ``latents`` [N, H] the images' features, ``memory_latents`` [M, H] and ``memory_labels`` [M, K]
    (one-hot, zero rows for empty slots, which count for no class). A class with no sample in the
    memory gets MASKED_LOGIT, so it is never predicted while another class is allowed.
    """
    rows = normalize_embeddings(latents)
    sums = tf.matmul(memory_labels, normalize_embeddings(memory_latents), transpose_a=True)  # [K, H]
    means = normalize_embeddings(sums)  # the class means' directions (the count only scales them)
    present = tf.reduce_sum(memory_labels, axis=0) > 0  # [K]
    cosines = tf.matmul(rows, means, transpose_b=True)  # [N, K]
    return tf.where(present[None, :], cosines / temperature, MASKED_LOGIT)
