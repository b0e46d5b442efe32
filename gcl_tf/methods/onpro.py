"""OnPro: online prototype learning (Wei et al., ICCV 2023, "Online Prototype Learning for Online
Continual Learning"), from the authors' code (weilllllls/OnPro; its instance contrast is OCM's).

A step sums OCM's instance contrast of rotated copies and their views, OPE's prototype contrast on
the incoming and the replay batch, and the linear head's cross-entropy: on the incoming batch in
the first task (the authors' ``train_task0``), on the replay batch mixed by APF after it
(``train_other_tasks``; ``tf.cond`` in the compiled step). Its views are the authors' transform,
part of the method, whatever ``augment`` says (accepted so that a protocol's config applies to
every method); ``views: protocol`` draws them from ``augment`` instead (today's protocol's set,
with colour jitter). The step, each deviation and why: docs/onpro.md. One device.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from gcl_tf import salts
from gcl_tf.augment import augment, random_flip, random_grayscale, random_resized_crop
from gcl_tf.backbones import classifier, feature_size
from gcl_tf.errors import ConfigError
from gcl_tf.memory import ReservoirMemory, state_variable, step_seed
from gcl_tf.methods.base import ContinualModel, cross_entropy, present_classes
from gcl_tf.methods.configs import OnProConfig
from gcl_tf.precision import float32

EPS = 1e-8  # the authors' epsilon in the instance contrast
CROP_SCALE = (0.3, 1.0)  # the authors' random resized crop
GRAYSCALE_P = 0.25


# ----------------------------------------------------------------------------- the math, pure functions
def normalize(x):
    """Rows of ``x`` over their L2 norm (at least 1e-12, as torch's F.normalize)."""
    return tf.math.l2_normalize(x, axis=-1, epsilon=1e-24)


def rotate(images, count: int):
    """OCM's rotated copies of ``images`` [N, H, W, C] (square), ``count * N`` of them, copy-major:
    16 = the image, its left half turned 180 degrees, both halves, its right half, each turned by
    0, 180, 90, 270 degrees (counter-clockwise); 4 = the image turned so; 1 = the image."""
    if count == 1:
        return images
    if count == 16:
        half = images.shape[2] // 2
        left, right = images[:, :, :half], images[:, :, half:]
        turned_left, turned_right = tf.reverse(left, [1, 2]), tf.reverse(right, [1, 2])
        images = tf.concat([images, tf.concat([turned_left, right], 2), tf.concat([turned_left, turned_right], 2),
                            tf.concat([left, turned_right], 2)], axis=0)
    return tf.concat([tf.image.rot90(images, k) for k in (0, 2, 1, 3)], axis=0)


def rotation_labels(labels, count: int, num_classes: int):
    """[count * N] float32 labels of :func:`rotate`'s copies: copy ``i`` of label ``y`` is ``y + K i``."""
    labels = tf.cast(labels, tf.float32)
    return tf.concat([labels + float(num_classes * i) for i in range(count)], axis=0)


def contrast_similarity(projections, features, start, scale: float):
    """``scale * (z z' + z f[:, start:start + P]')`` [2B, 2B] of normalised projections ``z`` [2B, P]
    and normalised features ``f`` [2B, D] (OCM's projection-vs-feature-slice similarity)."""
    sliced = tf.slice(features, tf.stack([0, start]), [-1, projections.shape[-1]])
    return scale * tf.matmul(projections, sliced + projections, transpose_b=True)


def _contrast_terms(sim, labels, temperature, valid, exclude_self: bool):
    """``-log p`` [2B, 2B] of each column in its row's softmax, the positives' weights (equal labels,
    rows summing to 1), both over the ``valid`` [B] samples, and ``valid`` tiled [2B] (float)."""
    b = sim.shape[0] // 2
    valid = tf.tile(tf.ones([b]) if valid is None else tf.cast(valid, tf.float32), [2])
    labels, columns = tf.tile(labels, [2]), valid[None, :]
    top = tf.reduce_max(tf.where(columns > 0, sim, tf.reduce_min(sim)), axis=1, keepdims=True)
    scores = tf.exp((sim - tf.stop_gradient(top)) / temperature) * columns
    if exclude_self:
        scores *= 1.0 - tf.eye(sim.shape[0])
    nll = -tf.math.log(scores / (tf.reduce_sum(scores, axis=1, keepdims=True) + EPS) + EPS)
    same = tf.cast(tf.equal(labels[:, None], labels[None, :]), tf.float32) * columns
    return nll, same / (tf.reduce_sum(same, axis=1, keepdims=True) + EPS), valid


def nt_xent(sim, labels, temperature: float, valid=None):
    """OCM's ``Supervised_NT_xent_n`` on ``sim`` [2B, 2B] (rows: B samples, then their views),
    ``labels`` [B] (the views' too), over the ``valid`` [B] samples only (None: all)."""
    b = sim.shape[0] // 2
    nll, positives, valid = _contrast_terms(sim, labels, temperature, valid, exclude_self=True)
    count = tf.maximum(tf.reduce_sum(valid) / 2.0, 1.0)
    supervised = tf.reduce_sum(valid[:, None] * positives * nll) / count
    pairs = tf.linalg.diag_part(nll[:b, b:]) + tf.linalg.diag_part(nll[b:, :b])
    return tf.reduce_sum(valid[:b] * pairs) / (2.0 * count) + supervised


def nt_xent_uni(sim, labels, temperature: float, valid=None):
    """OCM's ``Supervised_NT_xent_uni`` (each row's own similarity stays in its softmax, no
    view-pair term), over the ``valid`` [B] samples only."""
    nll, positives, valid = _contrast_terms(sim, labels, temperature, valid, exclude_self=False)
    return tf.reduce_sum(valid[:, None] * positives * nll) / tf.maximum(tf.reduce_sum(valid), 1.0)


def class_means(z, labels, weights, num_classes: int):
    """[K, P] weighted mean of the rows of ``z`` of each class (zeros for a class absent) and [K] counts."""
    onehot = tf.one_hot(labels, num_classes) * tf.cast(weights, tf.float32)[:, None]
    counts = tf.reduce_sum(onehot, axis=0)
    return tf.matmul(onehot, z, transpose_a=True) / tf.maximum(counts, 1.0)[:, None], counts


def ope_loss(z1, z2, labels, weights, num_classes: int, temperature: float):
    """OPE: ``(loss, prototypes of z1, prototypes of z2)``. Each class present (weight > 0) has a
    prototype per view (its mean projection, normalised); the loss is SimCLR's NT-Xent between the
    views' prototypes (positive: the same class's in the other view); 0 with no class present."""
    p1, counts = class_means(z1, labels, weights, num_classes)
    p2, _ = class_means(z2, labels, weights, num_classes)
    present = tf.tile(tf.cast(counts > 0, tf.float32), [2])  # [2K]
    z = tf.concat([normalize(p1), normalize(p2)], axis=0)
    logits = tf.matmul(z, z, transpose_b=True) / temperature
    logits -= tf.stop_gradient(tf.reduce_max(tf.where(present[None, :] > 0, logits, -1.0 / temperature),
                                             axis=1, keepdims=True))
    others = present[None, :] * (1.0 - tf.eye(2 * num_classes))
    log_prob = logits - tf.math.log(tf.reduce_sum(tf.exp(logits) * others, axis=1) + (1.0 - present))[:, None]
    partner = tf.concat([tf.range(num_classes, 2 * num_classes), tf.range(num_classes)], axis=0)
    positive = tf.gather(log_prob, partner, axis=1, batch_dims=1)
    return -tf.reduce_sum(present * positive) / tf.maximum(tf.reduce_sum(present), 1.0), p1, p2


def pair_probabilities(means):
    """[K, K] APF's probability of each class pair ``i < j`` of classes with a mean (a row not all
    zero): the softmax over those pairs of ``1 / ||mean_i - mean_j||``; zeros elsewhere."""
    k = means.shape[0]
    present = tf.reduce_sum(tf.abs(means), axis=1) > 0
    valid = present[:, None] & present[None, :] & (tf.range(k)[:, None] < tf.range(k)[None, :])
    distance = tf.norm(means[:, None, :] - means[None, :, :], axis=-1)
    closeness = 1.0 / tf.maximum(distance, 1e-12)
    scores = tf.exp(tf.where(valid, closeness - tf.reduce_max(tf.where(valid, closeness, 0.0)), -float("inf")))
    return scores / tf.maximum(tf.reduce_sum(scores), 1e-30)


def pair_counts(probabilities, total, seed):
    """[K, K] samples for each class pair, as APF rounds ``probabilities * total``: each rounded (to
    even), then the difference to ``total`` spread, one sample each, over pairs drawn at random
    (added: among all pairs of positive probability; taken: among pairs holding some)."""
    shape = tf.shape(probabilities)
    p = tf.reshape(probabilities, [-1])
    counts = tf.round(p * tf.cast(total, tf.float32))
    diff = tf.cast(total, tf.float32) - tf.reduce_sum(counts)
    u = tf.random.stateless_uniform(tf.shape(p), seed)
    ranks = [tf.argsort(tf.argsort(tf.where(drawn, u, -1.0), direction="DESCENDING")) for drawn in (p > 0, counts > 0)]
    add = ranks[0] < tf.cast(tf.maximum(diff, 0.0), tf.int32)
    take = ranks[1] < tf.cast(tf.maximum(-diff, 0.0), tf.int32)
    counts += tf.cast(add & (p > 0), tf.float32) - tf.cast(take & (counts > 0), tf.float32)
    return tf.reshape(tf.cast(counts, tf.int32), shape)


def pair_of_position(counts, size: int):
    """[size] the flat index (``i * K + j``) of the pair that position ``s`` of the close-class
    mixups comes from: the pairs in order (``i < j`` row by row), each ``counts`` times."""
    ends = tf.cumsum(tf.reshape(counts, [-1]))
    index = tf.searchsorted(ends, tf.range(size, dtype=ends.dtype), side="right")
    return tf.minimum(index, tf.size(ends) - 1)


def random_mixup(size: int, count, p: float, lower: float, upper: float, seed):
    """APF's random share (kornia's RandomMixUpV2) on the first ``count`` of ``size`` rows: ``(partner,
    weight)`` [size]. With probability ``p`` the batch mixes: each row with probability ``p``, weight
    uniform in [lower, upper], partners a random permutation of the rows; others: themselves, 0."""
    s_batch, s_row, s_weight, s_perm = tf.unstack(tf.random.experimental.stateless_split(seed, 4))
    rows = tf.range(size)
    inside = rows < count
    keys = tf.where(inside, tf.random.stateless_uniform([size], s_perm), 2.0 + tf.cast(rows, tf.float32))
    partner = tf.argsort(keys)
    mixes = tf.random.stateless_uniform([], s_batch) < p
    row_mixes = (tf.random.stateless_uniform([size], s_row) < p) & inside & mixes
    weight = tf.where(row_mixes, tf.random.stateless_uniform([size], s_weight, lower, upper), 0.0)
    return tf.where(inside, partner, rows), weight


def pick_slots(memory_labels, filled, classes, seed):
    """[S] one memory slot of each class in ``classes`` [S], drawn uniformly among its stored
    samples (any stored sample for a class the memory no longer holds)."""
    u = tf.random.stateless_uniform([classes.shape[0], memory_labels.shape[0]], seed)
    held = filled[None, :] & tf.equal(memory_labels[None, :], classes[:, None])
    of_class = tf.argmax(tf.where(held, u, -1.0), axis=1, output_type=tf.int32)
    anything = tf.argmax(tf.where(filled[None, :], u, -1.0), axis=1, output_type=tf.int32)
    return tf.where(tf.reduce_any(held, axis=1), of_class, anything)


def mixup_cross_entropy(logits, first, second, weight, rows):
    """Mean over ``rows`` (weights [N]) of ``(1 - w) CE(first) + w CE(second)``."""
    losses = (1.0 - weight) * cross_entropy(first, logits) + weight * cross_entropy(second, logits)
    return tf.reduce_sum(rows * losses) / tf.maximum(tf.reduce_sum(rows), 1.0)


def authors_transform(images, seed):
    """The authors' views: a flip (p 0.5), grayscale (p 0.25), a random resized crop of area 0.3 to 1."""
    s_flip, s_gray, s_crop = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    images = random_grayscale(random_flip(images, s_flip), s_gray, GRAYSCALE_P)
    return random_resized_crop(images, s_crop, scale=CROP_SCALE)


# ----------------------------------------------------------------------------- the method
class OnPro(ContinualModel):
    """OnPro. ``memory_size``: samples in the reservoir memory; the other keywords: the keys of
    :class:`Config`. See :class:`~gcl_tf.methods.base.ContinualModel` for the common keywords."""

    Config = OnProConfig
    settings: OnProConfig

    label = "OnPro"
    style = ("#637939", "p")
    task_free = False  # the first task trains otherwise (train_task0); APF waits for a task's second step
    test_settings = {"memory_size": 20, "rotations": 4, "projection_size": 8}

    def __init__(self, backbone=None, *, num_classes, **keys):
        super().__init__(backbone, num_classes=num_classes, **keys)
        s = self.settings
        trunk = self.default_backbone(backbone)
        width = feature_size(trunk, self.image_shape)
        self.check_shapes(width, s.projection_size, s.rotations)
        self.network = classifier(trunk, self.image_shape, self.num_classes)
        self.projection = keras.layers.Dense(s.projection_size, name="projection")
        self.projection.build((None, width))
        self.memory = ReservoirMemory(s.memory_size, self.image_shape, seed=self.seed)
        # Classes seen (the authors' class_holder), the last step's task, each class's mean projection.
        self.seen_classes = state_variable(tf.zeros([self.num_classes], tf.int32), "seen_classes")
        self.last_task = state_variable(tf.constant(-1, tf.int32), "last_task")
        self.class_means = state_variable(tf.zeros([self.num_classes, s.projection_size]), "class_means")

    @property
    def draw_size(self) -> int:
        """Memory samples drawn a step (``replay_batch_size``, at most the memory's size)."""
        return min(self.settings.replay_batch_size, self.settings.memory_size)

    def check_shapes(self, width: int, projection_size: int, rotations: int) -> None:
        height, side = self.image_shape[0], self.image_shape[1]
        if projection_size >= width:  # OCM's contrast slides a slice of that width over the features
            raise ConfigError(f"method.projection_size: {projection_size} is not below the trunk's feature width "
                              f"{width}; allowed: 1 to {width - 1}")
        if rotations > 1 and (height != side or (rotations == 16 and side % 2)):
            raise ConfigError(f"method.rotations: {rotations} turns images (and, 16, their halves) by 90 degrees: "
                              f"needs square images (16: of even width), got {height}x{side}; allowed: 1"
                              + (" or 4" if height == side else ""))

    def call(self, x, training=False):
        return self.network(x, training=training)

    def embed(self, images):
        """Normalised trunk features [N, D] and projections [N, P] (training mode)."""
        trunk = next(layer for layer in self.network.layers if isinstance(layer, keras.Model))
        features = trunk(images, training=True)
        return normalize(float32(features)), normalize(float32(self.projection(features)))

    def seeds(self, salt: int, count: int) -> list:  # independent stateless seeds of this step
        return tf.unstack(tf.random.experimental.stateless_split(step_seed(self.seed, self.step_counter, salt), count))

    def slice_start(self, features, seed):
        """The feature slice's first column, uniform in [0, D - P) (the authors' randperm(D - P)[0])."""
        return tf.random.stateless_uniform([], seed, 0, features.shape[-1] - self.projection.units, tf.int32)

    def learn(self, x, y):
        seen = tf.maximum(self.seen_classes, tf.cast(present_classes(y, self.num_classes), tf.int32))
        draw = self.memory.sample(self.draw_size, self.step_counter)
        filled = tf.reduce_sum(tf.cast(draw["ok"], tf.int32))
        counted = tf.minimum(self.settings.replay_per_class * tf.reduce_sum(seen), filled)
        rows = tf.range(self.draw_size)  # draws past the memory's samples: copies of them (of x while empty)
        images = tf.where(filled > 0, tf.gather(draw["images"], rows % tf.maximum(filled, 1)),
                          tf.gather(x, rows % x.shape[0]))
        apf = tf.equal(self.current_task, self.last_task)  # not the task's first step
        with tf.GradientTape() as tape:
            terms, means = tf.cond(tf.equal(self.current_task, 0),
                                   lambda: self.first_task_terms(x, y, images, draw["labels"], filled),
                                   lambda: self.later_task_terms(x, y, images, draw["labels"], counted, apf))
            loss = tf.add_n(list(terms.values())) + self.weight_decay_term()
        self.apply_gradients(tape, loss)
        self.class_means.assign(tf.where(filled > 0, means, self.class_means))
        self.seen_classes.assign(seen)
        self.last_task.assign(self.current_task)
        self.memory.add(x, y)
        return {"loss": loss, **terms}

    def weight_decay_term(self):
        total = tf.add_n([tf.reduce_sum(tf.square(float32(v))) for v in self.trainable_variables])
        return 0.5 * self.settings.weight_decay * total

    def view(self, images, seed):
        """A view of each of ``images``: the authors' transform, or (``views: protocol``) the run's
        in-step augmentation."""
        if self.settings.views == "protocol":
            return augment(images, self.augment, seed)
        return authors_transform(images, seed)

    def views(self, images, seed):
        """The rotated copies of ``images`` and, after them, their views (the authors' images_pair)."""
        rotated = rotate(images, self.settings.rotations)
        return tf.concat([rotated, self.view(rotated, seed)], axis=0)

    def contrast(self, z, features, labels, seed, scale: float, loss=nt_xent, valid=None):
        """OCM's instance contrast of :meth:`views`' projections ``z`` and ``features``."""
        sim = contrast_similarity(z, features, self.slice_start(features, seed), scale)
        valid = None if valid is None else tf.tile(valid, [self.settings.rotations])
        return loss(sim, rotation_labels(labels, self.settings.rotations, self.num_classes),
                    self.settings.instance_temperature, valid)

    def memory_prototypes(self, images, labels, rows, seed):
        """OPE on the replay batch (``rows``: the samples that count) and its class means."""
        d, (_, z) = images.shape[0], self.embed(tf.concat([images, self.view(images, seed)], axis=0))
        loss, p1, p2 = ope_loss(z[:d], z[d:], labels, rows, self.num_classes, self.settings.proto_temperature)
        return loss, (p1 + p2) / 2.0

    def new_prototypes(self, z, y):
        """OPE on the incoming batch: its images (the first of the rotated copies) and their views."""
        n, half = y.shape[0], z.shape[0] // 2
        return ope_loss(z[:n], z[half:half + n], y, tf.ones([n]), self.num_classes,
                        self.settings.proto_temperature)[0]

    def first_task_terms(self, x, y, images, labels, filled):
        """The authors' train_task0: contrast and OPE on x, OPE on the memory, CE on x's view."""
        s = self.seeds(salts.ONPRO_VIEWS, 4)
        features, z = self.embed(self.views(x, s[0]))
        instance = self.contrast(z, features, y, s[1], 1.0)  # the first task: no sim_lambda
        rows = tf.cast(tf.range(self.draw_size) < filled, tf.float32)  # the whole memory, up to the draw size
        seen_loss, means = self.memory_prototypes(images, labels, rows, s[2])
        new_loss = self.new_prototypes(z, y)
        ce = tf.reduce_mean(cross_entropy(y, self.network(self.view(x, s[3]), training=True)))
        return {"loss_ce": ce, "loss_instance": instance, "loss_ope": new_loss + seen_loss}, means

    def later_task_terms(self, x, y, images, labels, counted, apf):
        """The authors' train_other_tasks: one pass over x's and the mixed replay's rotations and
        views; CE on the mixed replay's view; OPE on x and on the (unmixed) replay batch."""
        s = self.seeds(salts.ONPRO_VIEWS, 6)
        rows = tf.cast(tf.range(self.draw_size) < counted, tf.float32)
        mixed, first, second, weight = self.feedback(images, labels, counted, apf)
        mixed_labels = (1.0 - weight) * tf.cast(first, tf.float32) + weight * tf.cast(second, tf.float32)
        features, z = self.embed(tf.concat([self.views(x, s[0]), self.views(mixed, s[1])], axis=0))
        cut, lam = 2 * self.settings.rotations * x.shape[0], self.settings.sim_lambda
        instance = (self.contrast(z[:cut], features[:cut], y, s[2], lam)
                    + self.contrast(z[cut:], features[cut:], mixed_labels, s[3], lam, nt_xent_uni, rows))
        logits = self.network(self.view(mixed, s[4]), training=True)
        ce = mixup_cross_entropy(logits, first, second, weight, rows)
        seen_loss, means = self.memory_prototypes(images, labels, rows, s[5])
        new_loss = self.new_prototypes(z[:cut], y)
        return {"loss_ce": ce, "loss_instance": instance, "loss_ope": new_loss + seen_loss}, means

    def feedback(self, images, labels, counted, apf):
        """APF: ``(images, first labels, second labels, w)`` [D], rows ``(1 - w) first + w second``: below
        ``floor(mixup_base_rate * counted)`` mixed among themselves (:func:`random_mixup`), then up to
        ``counted`` memory samples of close classes mixed in pairs; the rest (all, ``apf`` False) as drawn."""
        cfg, d, k = self.settings, self.draw_size, self.num_classes
        s, rows = self.seeds(salts.ONPRO_MIXUP, 5), tf.range(d)
        base = tf.cast(tf.floor(tf.cast(counted, tf.float64) * cfg.mixup_base_rate), tf.int32)
        partner, w_random = random_mixup(d, base, cfg.mixup_p, cfg.mixup_lower, cfg.mixup_upper, s[0])
        probabilities = pair_probabilities(self.class_means)
        at = tf.clip_by_value(rows - base, 0, d - 1)  # each row's place among the close-class mixups
        pair = tf.gather(pair_of_position(pair_counts(probabilities, counted - base, s[1]), d), at)
        mixes = tf.gather(tf.random.stateless_uniform([k * k], s[2]) < cfg.mixup_p, pair)  # a draw per pair
        g1, g2 = [tf.random.stateless_gamma([d], seed, cfg.mixup_alpha)
                  for seed in tf.unstack(tf.random.experimental.stateless_split(s[3], 2))]
        slots = pick_slots(self.memory.labels, self.memory.filled(), tf.concat([pair // k, pair % k], 0), s[4])
        close = apf & (rows >= base) & (rows < counted) & (tf.reduce_sum(probabilities) > 0)
        w = tf.where(close, tf.where(mixes, g1 / tf.maximum(g1 + g2, 1e-30), 0.0),  # Beta(alpha, alpha)
                     tf.where(apf & (rows < base), w_random, 0.0))
        stored_x, stored_y = tf.gather(self.memory.images, slots), tf.gather(self.memory.labels, slots)

        def pick(stored, drawn):
            return tf.where(tf.reshape(close, [-1] + [1] * (drawn.shape.rank - 1)), stored, drawn)

        x1, x2 = pick(stored_x[:d], images), pick(stored_x[d:], tf.gather(images, partner))
        weight = w[:, None, None, None]
        return ((1.0 - weight) * x1 + weight * x2, pick(stored_y[:d], labels),
                pick(stored_y[d:], tf.gather(labels, partner)), w)
