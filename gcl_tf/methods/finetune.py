"""Finetune: plain online training on the stream (the lower bound every method must beat)."""
from __future__ import annotations

import tensorflow as tf

from gcl_tf.backbones import classifier
from gcl_tf.distribute import num_replicas
from gcl_tf.methods.base import ContinualModel, cross_entropy
from gcl_tf.methods.configs import FinetuneConfig


class Finetune(ContinualModel):
    """Plain online training; the common keywords only (see :class:`~gcl_tf.methods.base.ContinualModel`)."""

    Config = FinetuneConfig
    settings: FinetuneConfig

    style = ("#7f7f7f", "o")  # grey: the lower bound
    supports_distribution = True

    def __init__(self, backbone=None, *, num_classes, **keys):
        super().__init__(backbone, num_classes=num_classes, **keys)
        self.network = classifier(self.default_backbone(backbone), self.image_shape, self.num_classes)

    def call(self, x, training=False):
        return self.network(x, training=training)

    def learn(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(cross_entropy(y, self(self.augmented(x), training=True)))
            replica_loss = loss / num_replicas()  # gradients are summed over replicas
        self.apply_gradients(tape, replica_loss)
        return {"loss": loss}
