"""Finetune: plain online training on the stream (the lower bound every method must beat)."""
from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from gcl_tf.backbones import build_classifier
from gcl_tf.config import MethodConfig
from gcl_tf.distribute import num_replicas
from gcl_tf.methods.base import ContinualModel, cross_entropy


@dataclass
class Config(MethodConfig):
    name: str = "finetune"


class Method(ContinualModel):
    supports_distribution = True

    def __init__(self, config, input_shape, num_classes):
        super().__init__(config, input_shape, num_classes)
        self.network = build_classifier(config.model, input_shape, num_classes)

    def call(self, x, training=False):
        return self.network(x, training=training)

    def learn(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(cross_entropy(y, self(x, training=True)))
            replica_loss = loss / num_replicas()  # gradients are summed over replicas
        self.apply_gradients(tape, replica_loss)
        return {"loss": loss}
