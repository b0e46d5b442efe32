"""ER: experience replay with a reservoir memory (Chaudhry et al. 2019, "On Tiny Episodic Memories
in Continual Learning"). Each step trains on the incoming batch plus a batch drawn from the
memory, then reservoir-inserts the incoming batch. Task-free.

The worked example of docs/api.md, "Adding a method"."""
from __future__ import annotations

import tensorflow as tf

from gcl_tf import batchnorm
from gcl_tf.backbones import classifier
from gcl_tf.distribute import gather_in_order, num_replicas
from gcl_tf.errors import ConfigError
from gcl_tf.memory import ReservoirMemory, replay_batch
from gcl_tf.methods.base import ContinualModel, cross_entropy
from gcl_tf.methods.configs import ERConfig
from gcl_tf.methods.replay import global_count, logged, replica_share


class ER(ContinualModel):
    """Experience replay. ``memory_size``: samples in the reservoir memory; ``replay_batch_size``:
    memory samples replayed per step (None: the training batch size). See
    :class:`~gcl_tf.methods.base.ContinualModel` for the common keywords."""

    Config = ERConfig
    settings: ERConfig

    style = ("#8c564b", "P")
    supports_distribution = True
    test_settings = {"memory_size": 20}

    def __init__(self, backbone=None, *, num_classes, **keys):
        super().__init__(backbone, num_classes=num_classes, **keys)
        self.network = classifier(self.default_backbone(backbone), self.image_shape, self.num_classes)
        self.memory = self.make_memory()

    def make_memory(self) -> ReservoirMemory:
        """The episodic memory, filled by reservoir sampling (a method that fills it by another rule
        returns a memory of its own with the same fields: CBRS)."""
        return ReservoirMemory(self.settings.memory_size, self.image_shape, seed=self.seed,
                               extra=self.memory_fields(self.num_classes))

    def replay_size(self, batch: int) -> int:
        """Samples replayed with a (global) batch of ``batch``."""
        return min(self.settings.replay_batch_size or self.batch_size or batch, self.settings.memory_size)

    @classmethod
    def check_replicas(cls, config, replicas):
        replay = min(config.method.replay_batch_size or config.train.batch_size, config.method.memory_size)
        if replay % replicas:
            raise ConfigError(f"method.replay_batch_size: {replay} does not split evenly over {replicas} replicas; "
                              f"allowed: a multiple of {replicas}")

    def call(self, x, training=False):
        return self.network(x, training=training)

    def test_statistics(self):
        """``test_batchnorm: memory``: the network's BatchNorm statistics from the filled memory's images
        (:func:`gcl_tf.batchnorm.statistics_of`); else as they are."""
        return batchnorm.test_statistics(self.network, self.memory, self.settings.test_batchnorm)

    def retrieve(self, x, y, size: int) -> dict:
        """This replica's part of the replay batch of ``size`` samples (over all replicas) to
        learn with the incoming batch ``x, y``, as :func:`~gcl_tf.memory.replay_batch` returns
        it: ER draws it at random (a method that chooses its replay batch overrides this)."""
        return replay_batch(self.memory, size, self.step_counter)

    def learn(self, x, y):
        batch = x.shape[0]
        # Collectives must run in the same order on every replica: chain them by dependencies.
        stream_x, stream_y = gather_in_order(x, y)  # the global batch, for the memory
        replay = self.retrieve(x, y, self.replay_size(batch * num_replicas()))
        inputs = self.augmented(tf.concat([x, replay["images"]], axis=0))  # the memory keeps x as it came
        labels = tf.concat([y, replay["labels"]], axis=0)
        weights = tf.concat([tf.ones([batch]), tf.cast(replay["ok"], tf.float32)], axis=0)
        with tf.control_dependencies([stream_x, stream_y]):
            total_weight = global_count(weights)  # of the global batch
        with tf.GradientTape() as tape:
            losses = cross_entropy(labels, self(inputs, training=True))
            loss = replica_share(losses, total_weight, weights)  # summed over replicas: the global mean
        self.apply_gradients(tape, loss)
        self.memory.add(stream_x, stream_y)
        return logged({"loss": loss})
