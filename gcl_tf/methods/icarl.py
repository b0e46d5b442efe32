"""iCaRL: incremental classifier and representation learning (Rebuffi et al. 2017), online.

Training (each step): the incoming batch plus a batch of exemplars replayed from memory, with the
original's loss, a sigmoid binary cross-entropy over the outputs of the classes seen so far:
classes of the current task get one-hot targets (classification) and classes of earlier tasks get
the sigmoid outputs of the network as it was at the end of the previous task (distillation). The
loss is averaged over those classes and over the samples, as in the authors' TensorFlow code.

At the end of each task (``on_task_end``): the exemplar sets are rebuilt with ``memory_size``
split evenly across the sets seen (``m = memory_size // sets``): old sets keep their first ``m``
exemplars (herding order is priority order), and each class of the finished task gets ``m``
exemplars chosen by herding (Algorithm 4: the ``k``-th exemplar brings the mean of the chosen
L2-normalised features closest to the class mean). Then the class means of the exemplars'
normalised features (re-normalised) are stored, and the network is copied for distillation.

Test (``predict_log_probs``): nearest mean of exemplars on L2-normalised features, among the
classes allowed by the class mask that have exemplars; scores ``-||phi(x) - mu_y||^2`` are turned
into log-probabilities by a log-softmax (the argmax is the nearest mean).

An exemplar set is a (task, class) pair: on class-split streams (the paper runs iCaRL on Split
CIFAR100, multi-head) that is a class, as in the original; on streams whose tasks share classes
(permuted, rotated) each task's classes get their own sets. The feature extractor is the backbone
(``model.backbone``) and the classifier one linear layer on it. Needs task boundaries.
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from gcl_tf import salts
from gcl_tf.backbones import classifier
from gcl_tf.errors import ConfigError
from gcl_tf.memory import (
    ExemplarMemory,
    sample_without_replacement,
    step_seed,
)
from gcl_tf.methods.base import NEG_INF, ContinualModel
from gcl_tf.methods.common import collect_dataset
from gcl_tf.methods.configs import ICaRLConfig
from gcl_tf.optimizers import averages_in_place, averaging_optimizer
from gcl_tf.precision import float32


def check_exemplar_sets(memory_size: int, sets: int, key: str = "method.memory_size") -> None:
    """A ConfigError unless every one of ``sets`` exemplar sets gets an exemplar."""
    if memory_size < sets:
        raise ConfigError(f"{key}: {memory_size} leaves icarl no exemplar for some of its {sets} exemplar sets; "
                          f"allowed: at least {sets}")


# ----------------------------------------------------------------------------- pure math


def l2_normalize(features):
    return tf.math.l2_normalize(features, axis=-1)


def herding(features, m):
    """Herding exemplar selection (iCaRL Algorithm 4) on normalised ``features`` [n, D].

    Returns the indices [min(m, n)] of the chosen samples in selection order: the ``k``-th
    minimises ``||mu - (phi(x) + sum_{j<k} phi(p_j)) / k||`` over the samples not chosen yet,
    ``mu`` being the mean of all ``features``. The first is the sample closest to the mean.
    """
    features = tf.convert_to_tensor(features, tf.float32)
    n = tf.shape(features)[0]
    count = tf.minimum(tf.cast(m, tf.int32), n)
    mean = tf.reduce_mean(features, axis=0)

    def body(k, chosen_sum, taken, order):
        candidate = (chosen_sum[None, :] + features) / tf.cast(k + 1, tf.float32)  # [n, D]
        dist = tf.reduce_sum(tf.square(mean[None, :] - candidate), axis=1)
        dist = tf.where(taken, tf.fill(tf.shape(dist), tf.constant(np.inf, tf.float32)), dist)
        best = tf.argmin(dist, output_type=tf.int32)
        return (
            k + 1,
            chosen_sum + features[best],
            tf.logical_or(taken, tf.equal(tf.range(n), best)),
            order.write(k, best),
        )

    order = tf.TensorArray(tf.int32, size=count)
    _, _, _, order = tf.while_loop(
        lambda k, *_: k < count,
        body,
        (tf.constant(0), tf.zeros([tf.shape(features)[1]]), tf.zeros([n], tf.bool), order),
    )
    return order.stack()


def nearest_mean_scores(features, means, available):
    """Nearest-mean-of-exemplars scores ``-||phi(x) - mu_y||^2`` [N, K] on normalised features.

    ``means`` [K, D] (normalised), ``available`` [K] or [N, K] bool: classes that may be chosen
    (others get a large negative score).
    """
    f = l2_normalize(features)
    d = (
        tf.reduce_sum(tf.square(f), axis=1, keepdims=True)
        - 2.0 * tf.matmul(f, means, transpose_b=True)
        + tf.reduce_sum(tf.square(means), axis=1)[None, :]
    )
    available = tf.broadcast_to(tf.cast(available, tf.bool), tf.shape(d))
    return tf.where(available, -d, tf.cast(NEG_INF, d.dtype))


def icarl_targets(labels, old_logits, current_mask, old_mask, num_classes):
    """Targets [N, K] of iCaRL's loss: one-hot on the current task's classes, the previous
    network's sigmoid outputs on earlier classes (0 elsewhere, where the loss is not counted)."""
    onehot = tf.one_hot(labels, num_classes)
    distill = tf.sigmoid(old_logits)
    old_only = tf.logical_and(old_mask, tf.logical_not(current_mask))
    return tf.where(current_mask[None, :], onehot, tf.where(old_only[None, :], distill, tf.zeros_like(onehot)))


# ----------------------------------------------------------------------------- method


def _backbone_of(network: keras.Model) -> keras.Model:
    return next(layer for layer in network.layers if isinstance(layer, keras.Model))


class ICaRL(ContinualModel):
    """iCaRL. ``memory_size``: exemplars over all exemplar sets (a set per class of each task);
    ``replay_batch_size``: exemplars replayed with each batch (None: the training batch size);
    ``num_tasks``, ``classes_per_task`` (None: all classes): the stream's, if known, to check
    ``memory_size`` at once (else at each task's end). See
    :class:`~gcl_tf.methods.base.ContinualModel` for the common keywords; the previous network
    is a clone of ``backbone``."""

    Config = ICaRLConfig
    settings: ICaRLConfig

    label = "iCaRL"
    style = ("#ff7f0e", "^")
    task_free = False
    test_settings = {"memory_size": 20}

    def __init__(self, backbone=None, *, num_classes, num_tasks=None, classes_per_task=None, **keys):
        super().__init__(backbone, num_classes=num_classes, **keys)
        self.num_tasks, self.classes_per_task = num_tasks, classes_per_task
        memory_size = self.settings.memory_size
        if num_tasks is not None:
            check_exemplar_sets(memory_size, num_tasks * (classes_per_task or self.num_classes))
        backbone = self.default_backbone(backbone)
        self.network = classifier(backbone, self.image_shape, self.num_classes)
        self.feature_extractor = _backbone_of(self.network)
        self.old_network = classifier(keras.models.clone_model(backbone), self.image_shape, self.num_classes,
                                      name="previous_classifier")
        self.old_network.trainable = False
        feature_dim = int(self.feature_extractor.output_shape[-1])
        self.exemplars = ExemplarMemory(memory_size, self.image_shape, self.num_classes, feature_dim)
        self._features_fn = tf.function(self._features, reduce_retracing=True)
        self._herding_fn = tf.function(herding, reduce_retracing=True)

    def get_config(self):
        return {**super().get_config(), "num_tasks": self.num_tasks, "classes_per_task": self.classes_per_task}

    def call(self, x, training=False):
        return self.network(x, training=training)

    # ------------------------------------------------------------------ training
    def on_task_begin(self, task_index, classes):
        super().on_task_begin(task_index, classes)
        mask = np.zeros(self.num_classes, bool)
        mask[np.asarray(classes, dtype=np.int64)] = True
        self.exemplars.current_classes.assign(mask)

    def learn(self, x, y):
        ex = self.exemplars
        seed = step_seed(self.seed, self.step_counter, salts.REPLAY)
        replay = min(self.settings.replay_batch_size or self.batch_size or int(x.shape[0]), self.settings.memory_size)
        index, ok = sample_without_replacement(ex.valid(), replay, seed)
        inputs = tf.concat([x, tf.gather(ex.images, index)], axis=0)
        labels = tf.concat([y, tf.gather(ex.labels, index)], axis=0)
        weights = tf.concat([tf.ones(tf.shape(y)), tf.cast(ok, tf.float32)], axis=0)
        current = ex.current_classes
        old = ex.old_classes
        has_old = tf.reduce_any(tf.logical_and(old, tf.logical_not(current)))
        old_logits = tf.cond(
            has_old,
            lambda: self.old_network(inputs, training=False),
            lambda: tf.zeros([tf.shape(inputs)[0], self.num_classes]),
        )
        old_logits = tf.stop_gradient(old_logits)
        targets = icarl_targets(labels, old_logits, current, old, self.num_classes)
        seen = tf.cast(tf.logical_or(current, old), tf.float32)
        with tf.GradientTape() as tape:
            logits = self(inputs, training=True)
            bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=logits)
            per_sample = tf.reduce_sum(bce * seen[None, :], axis=1) / tf.reduce_sum(seen)
            loss = tf.reduce_sum(weights * per_sample) / tf.reduce_sum(weights)
        self.apply_gradients(tape, loss, self.network.trainable_variables)
        return {"loss": loss}

    # ------------------------------------------------------------------ task end
    def _features(self, x):
        return l2_normalize(float32(self.feature_extractor(x, training=False)))

    def features(self, x: np.ndarray) -> np.ndarray:
        """Normalised features of host images, in batches of the evaluation size."""
        out, chunk = [], self.eval_batch_size or 500
        for start in range(0, len(x), chunk):
            out.append(self._features_fn(tf.constant(x[start:start + chunk], tf.float32)).numpy())
        return np.concatenate(out) if out else np.zeros((0, int(self.exemplars.class_means.shape[1])), np.float32)

    def on_task_end(self, task_index, dataset):
        ex = self.exemplars
        images, labels = collect_dataset(dataset, unique=True)
        set_id = ex.set_id.numpy()
        rank = ex.rank.numpy()
        old_images, old_labels = ex.images.numpy(), ex.labels.numpy()
        classes = np.flatnonzero(ex.current_classes.numpy())
        new_sets = [c for c in classes if images is not None and np.any(labels == c)]
        new_ids = {task_index * self.num_classes + c for c in new_sets}
        old_sets = sorted(set(int(s) for s in set_id[set_id >= 0]) - new_ids)
        check_exemplar_sets(self.settings.memory_size, len(old_sets) + len(new_sets))
        m = self.settings.memory_size // max(1, len(old_sets) + len(new_sets))

        keep = np.flatnonzero((set_id >= 0) & (rank < m) & np.isin(set_id, old_sets))
        out_images = [old_images[keep]]
        out_labels = [old_labels[keep]]
        out_sets = [set_id[keep]]
        out_rank = [rank[keep]]
        if new_sets:
            feats = self.features(images)
            for c in new_sets:
                members = np.flatnonzero(labels == c)
                order = self._herding_fn(tf.constant(feats[members]), tf.constant(m, tf.int32)).numpy()
                chosen = members[order]
                out_images.append(images[chosen])
                out_labels.append(labels[chosen])
                out_sets.append(np.full(len(chosen), task_index * self.num_classes + c, np.int32))
                out_rank.append(np.arange(len(chosen), dtype=np.int32))
        new_images = np.concatenate(out_images)
        new_labels = np.concatenate(out_labels).astype(np.int32)
        new_sets_arr = np.concatenate(out_sets).astype(np.int32)
        new_rank = np.concatenate(out_rank).astype(np.int32)
        count = len(new_labels)
        pad = self.settings.memory_size - count
        ex.images.assign(np.concatenate([new_images, np.zeros((pad,) + new_images.shape[1:], np.float32)]))
        ex.labels.assign(np.concatenate([new_labels, np.zeros(pad, np.int32)]))
        ex.set_id.assign(np.concatenate([new_sets_arr, np.full(pad, -1, np.int32)]))
        ex.rank.assign(np.concatenate([new_rank, np.zeros(pad, np.int32)]))

        # Class means of the exemplars' normalised features, re-normalised, by the weights predictions read (with
        # train.ema_momentum, their averages).
        with averages_in_place(averaging_optimizer(self.optimizer)):
            feats = self.features(new_images)
        means = np.zeros(ex.class_means.shape, np.float32)
        has = np.zeros(self.num_classes, bool)
        for c in np.unique(new_labels):
            mu = feats[new_labels == c].mean(axis=0)
            means[c] = mu / max(np.linalg.norm(mu), 1e-12)
            has[c] = True
        ex.class_means.assign(means)
        ex.has_mean.assign(has)
        ex.old_classes.assign(np.logical_or(ex.old_classes.numpy(), ex.current_classes.numpy()))
        for target, source in zip(self.old_network.weights, self.network.weights):
            target.assign(source)

    # ------------------------------------------------------------------ test
    def predict_log_probs(self, x, class_mask):
        ex = self.exemplars
        features = float32(self.feature_extractor(x, training=False))  # a mixed-precision trunk's too
        available = tf.logical_and(tf.cast(class_mask, tf.bool), ex.has_mean)
        return tf.nn.log_softmax(nearest_mean_scores(features, ex.class_means, available), axis=-1)
