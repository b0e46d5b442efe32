"""ER: experience replay with a reservoir memory (Chaudhry et al. 2019, "On Tiny Episodic Memories
in Continual Learning"). Each step trains on the incoming batch plus a batch drawn from the
memory, then reservoir-inserts the incoming batch. Task-free."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import tensorflow as tf

from gcl_tf.backbones import build_classifier
from gcl_tf.config import MethodConfig, _range
from gcl_tf.memory import ReservoirMemory
from gcl_tf.methods.base import ContinualModel, cross_entropy


@dataclass
class Config(MethodConfig):
    name: str = "er"
    memory_size: int = field(default=1000, metadata=_range(1))
    # Samples replayed from memory per step (null: the training batch size).
    replay_batch_size: Optional[int] = field(default=None, metadata=_range(1))


class Method(ContinualModel):
    def __init__(self, config, input_shape, num_classes):
        super().__init__(config, input_shape, num_classes)
        self.network = build_classifier(config.model, input_shape, num_classes)
        self.memory = ReservoirMemory(config.method.memory_size, input_shape, seed=config.seed)
        replay = config.method.replay_batch_size or config.train.batch_size
        self.replay_batch_size = min(replay, config.method.memory_size)

    def call(self, x, training=False):
        return self.network(x, training=training)

    def learn(self, x, y):
        batch = tf.shape(x)[0]
        mem_x, mem_y, ok = self.memory.sample(self.replay_batch_size, self.step_counter)
        inputs = tf.concat([x, mem_x], axis=0)
        labels = tf.concat([y, mem_y], axis=0)
        weights = tf.concat([tf.ones([batch]), tf.cast(ok, tf.float32)], axis=0)
        with tf.GradientTape() as tape:
            losses = cross_entropy(labels, self(inputs, training=True))
            loss = tf.reduce_sum(weights * losses) / tf.reduce_sum(weights)
        self.apply_gradients(tape, loss)
        self.memory.add(x, y)
        return {"loss": loss}
