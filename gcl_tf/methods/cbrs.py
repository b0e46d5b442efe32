"""CBRS: experience replay whose memory is filled by class-balancing reservoir sampling
(Chrysakis & Moens, ICML 2020, "Online Continual Learning from Imbalanced Data", Algorithm 1).

ER's step, with another rule for which stored sample an incoming one replaces once the memory is
full. A class is *full* once it has been the largest in the memory (it stays so). A sample of a
class that is not full replaces a random stored sample of a largest class; a sample of a full
class ``c`` replaces a random stored sample of its own class with probability ``m_c / n_c`` (``m_c``
its samples in the memory, ``n_c`` those of the stream so far), as reservoir sampling within the
class. On an imbalanced stream the memory then holds the rare classes' samples, where reservoir
sampling keeps each class in its share of the stream. The replay batch is drawn uniformly from
the memory, as ER's. The samples of a batch are inserted in order (a ``tf.while_loop`` over the
batch), so the memory is as if they came one by one. Task-free; runs distributed (the memory is
updated from the global batch, with the same draws on every replica).
"""
from __future__ import annotations

import tensorflow as tf

from gcl_tf import salts
from gcl_tf.memory import ReservoirMemory, state_variable, step_seed
from gcl_tf.methods import er


def class_balanced_slots(stored, filled, seen, full, labels, seeds):
    """Where CBRS puts each sample of a batch, in order (the paper's Algorithm 1).

    ``stored`` [M] int32: the memory's labels; ``filled``: its filled slots; ``seen`` [K] int64: the
    stream's samples of each class so far; ``full`` [K] bool; ``labels`` [B] int32; ``seeds`` [B, 2]:
    each sample's draw. Returns the slot of each sample ([B] int32, -1: not stored; a slot that a
    later sample of the batch takes again is the later's) and ``seen`` and ``full`` after the batch.
    """
    capacity, num_classes, batch = stored.shape[0], seen.shape[0], labels.shape[0]

    def insert(i, stored, filled, seen, full, slots):
        c = labels[i]
        seen = seen + tf.one_hot(c, num_classes, dtype=tf.int64)
        draws = tf.random.stateless_uniform([capacity + 1], seed=seeds[i], dtype=tf.float64)
        in_memory = tf.range(capacity) < filled
        counts = tf.math.unsorted_segment_sum(tf.cast(in_memory, tf.int32), stored, num_classes)  # m per class
        largest = tf.reduce_max(counts)
        is_full = filled >= capacity
        full = tf.logical_or(full, tf.logical_and(is_full, tf.equal(counts, largest)))

        def draw_from(mask):  # a uniformly drawn slot among ``mask``
            return tf.cast(tf.argmax(tf.where(mask, draws[1:], -1.0)), tf.int32)

        of_largest = tf.logical_and(in_memory, tf.equal(tf.gather(counts, stored), largest))
        of_own = tf.logical_and(in_memory, tf.equal(stored, c))
        kept = draws[0] * tf.cast(seen[c], tf.float64) <= tf.cast(counts[c], tf.float64)  # p = m_c / n_c
        slot = tf.where(tf.logical_not(is_full), filled,
                        tf.where(tf.logical_not(full[c]), draw_from(of_largest),
                                 tf.where(kept, draw_from(of_own), -1)))
        stored = tf.where(tf.logical_and(tf.range(capacity) == slot, slot >= 0), c, stored)
        slots = tf.where(tf.logical_and(slots == slot, slot >= 0), -1, slots)  # an earlier sample's, replaced
        slots = tf.tensor_scatter_nd_update(slots, [[i]], [slot])
        return i + 1, stored, filled + tf.cast(tf.logical_not(is_full), tf.int32), seen, full, slots

    state = (tf.constant(0), stored, filled, seen, full, -tf.ones([batch], tf.int32))
    _, _, _, seen, full, slots = tf.while_loop(lambda i, *_: i < batch, insert, state)
    return slots, seen, full


class ClassBalancedMemory(ReservoirMemory):
    """A :class:`~gcl_tf.memory.ReservoirMemory` filled by CBRS: the same fields and draws, and the
    stream's count of each class (``seen``) and the classes that are full (``full``), saved with it."""

    def __init__(self, capacity: int, image_shape, num_classes: int, seed: int = 0, extra=None):
        super().__init__(capacity, image_shape, seed=seed, extra=extra)
        with self.name_scope:
            self.seen = state_variable(tf.zeros([num_classes], tf.int64), "seen")
            self.full = state_variable(tf.zeros([num_classes], tf.bool), "full")

    def add(self, images, labels, **extra) -> tf.Tensor:
        """Insert a batch by CBRS; returns the slots used ([B] int32, -1 = not stored)."""
        labels = tf.cast(labels, tf.int32)
        counters = self.num_seen + tf.range(images.shape[0], dtype=tf.int64)  # each sample's, as one by one
        seeds = tf.map_fn(lambda n: step_seed(self.seed, n, salts.RESERVOIR), counters, fn_output_signature=tf.int32)
        slots, seen, full = class_balanced_slots(self.labels, self.num_filled, self.seen, self.full, labels, seeds)
        self.write(slots, images, labels, **extra)
        self.seen.assign(seen)
        self.full.assign(full)
        return slots


class CBRS(er.ER):
    """ER with a class-balanced memory. ``memory_size``, ``replay_batch_size``: as ER's (its keys:
    CBRS adds none). See :class:`~gcl_tf.methods.base.ContinualModel` for the common keywords."""

    label = "CBRS"
    style = ("#8c6d31", "d")  # a colour and marker of its own, as every registered method has

    def make_memory(self) -> ClassBalancedMemory:
        return ClassBalancedMemory(self.settings.memory_size, self.image_shape, self.num_classes, seed=self.seed,
                                   extra=self.memory_fields(self.num_classes))
