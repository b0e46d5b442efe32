"""iCaRL's exemplar memory: exemplar sets (one per class of each task, ranked by herding) and the
class means of their features, in tf.Variables."""
from __future__ import annotations

import tensorflow as tf


class ExemplarMemory(tf.Module):
    """Exemplars in tf.Variables: images, labels, set id (task * K + class), rank within the set."""

    def __init__(self, capacity: int, image_shape, num_classes: int, feature_dim: int, name: str = "exemplars"):
        super().__init__(name=name)
        self.capacity = int(capacity)
        self.image_shape = tuple(int(d) for d in image_shape)
        with self.name_scope:
            self.images = tf.Variable(tf.zeros((self.capacity,) + self.image_shape), trainable=False, name="images")
            self.labels = tf.Variable(tf.zeros([self.capacity], tf.int32), trainable=False, name="labels")
            self.set_id = tf.Variable(tf.fill([self.capacity], -1), trainable=False, name="set_id")
            self.rank = tf.Variable(tf.zeros([self.capacity], tf.int32), trainable=False, name="rank")
            self.class_means = tf.Variable(tf.zeros([num_classes, feature_dim]), trainable=False, name="class_means")
            self.has_mean = tf.Variable(tf.zeros([num_classes], tf.bool), trainable=False, name="has_mean")
            self.old_classes = tf.Variable(tf.zeros([num_classes], tf.bool), trainable=False, name="old_classes")
            self.current_classes = tf.Variable(tf.zeros([num_classes], tf.bool), trainable=False,
                                               name="current_classes")

    def valid(self):
        return self.set_id >= 0
