"""A fixed-capacity episodic memory filled by reservoir sampling (ER, MER; GCL's graph memory
builds on it), held in tf.Variables and updated inside the compiled train step."""
from __future__ import annotations

import tensorflow as tf

from gcl_tf.memory.state import (
    sample_without_replacement,
    scatter_update,
    state_variable,
    step_seed,
)

# Salts for the stateless random streams of different purposes.
SALT_RESERVOIR = 101
SALT_REPLAY = 102


def reservoir_slots(num_seen, batch_size: int, capacity: int, seed) -> tf.Tensor:
    """Slots where reservoir sampling (Vitter's algorithm R) puts a batch of stream samples.

    Sample ``i`` of the batch is the ``n = num_seen + i + 1``-th of the stream. While ``n <= M``
    it fills slot ``n - 1``; afterwards it replaces a uniformly drawn slot ``j < n`` if ``j < M``,
    so it is kept with probability ``M / n``. As when samples arrive one by one, a later sample
    of the batch overwrites an earlier one drawn to the same slot.

    Returns int32 ``[B]``: the slot of each sample, or -1 where it is not stored.
    """
    n = tf.cast(num_seen, tf.int64) + tf.range(1, batch_size + 1, dtype=tf.int64)  # [B]
    u = tf.random.stateless_uniform([batch_size], seed=seed, dtype=tf.float64)
    j = tf.minimum(tf.cast(tf.floor(u * tf.cast(n, tf.float64)), tf.int64), n - 1)  # uniform in [0, n)
    minus_one = tf.constant(-1, tf.int64)
    slot = tf.where(n <= capacity, n - 1, tf.where(j < capacity, j, minus_one))
    # Keep only the last sample of the batch aimed at each slot.
    later = tf.linalg.band_part(tf.ones([batch_size, batch_size], tf.bool), 0, -1)  # [B, B] k >= i
    later = tf.logical_and(later, tf.logical_not(tf.eye(batch_size, dtype=tf.bool)))  # k > i
    same = tf.equal(slot[:, None], slot[None, :])  # [B, B]
    overwritten = tf.reduce_any(tf.logical_and(same, later), axis=1)
    slot = tf.where(tf.logical_or(overwritten, slot < 0), minus_one, slot)
    return tf.cast(slot, tf.int32)


class ReservoirMemory(tf.Module):
    """Fixed-capacity episodic memory of images and labels filled by reservoir sampling."""

    def __init__(self, capacity: int, image_shape, seed: int = 0, name: str = "memory"):
        super().__init__(name=name)
        if capacity < 1:
            raise ValueError("memory capacity must be at least 1")
        self.capacity = int(capacity)
        self.image_shape = tuple(int(d) for d in image_shape)
        self.seed = int(seed)
        with self.name_scope:
            self.images = state_variable(tf.zeros((self.capacity,) + self.image_shape), "images")
            self.labels = state_variable(tf.zeros([self.capacity], tf.int32), "labels")
            self.num_seen = state_variable(tf.constant(0, tf.int64), "num_seen")
            self.num_filled = state_variable(tf.constant(0, tf.int32), "num_filled")

    def filled(self) -> tf.Tensor:
        """[M] bool: slots holding a sample."""
        return tf.range(self.capacity) < self.num_filled

    def reservoir_slots(self, batch_size: int) -> tf.Tensor:
        seed = step_seed(self.seed, self.num_seen, SALT_RESERVOIR)
        return reservoir_slots(self.num_seen, batch_size, self.capacity, seed)

    def write(self, slots, images, labels) -> None:
        """Store ``images[i], labels[i]`` in ``slots[i]`` where ``slots[i] >= 0``; advance the stream."""
        keep = slots >= 0
        index = tf.boolean_mask(slots, keep)[:, None]  # [k, 1]
        scatter_update(self.images, index, tf.boolean_mask(images, keep))
        scatter_update(self.labels, index, tf.boolean_mask(tf.cast(labels, tf.int32), keep))
        batch = tf.cast(tf.shape(slots)[0], tf.int64)
        self.num_seen.assign_add(batch)
        self.num_filled.assign(tf.cast(tf.minimum(self.num_seen, self.capacity), tf.int32))

    def add(self, images, labels) -> tf.Tensor:
        """Reservoir-insert a batch; returns the slots used ([B] int32, -1 = not stored)."""
        slots = self.reservoir_slots(images.shape[0])
        self.write(slots, images, labels)
        return slots

    def sample(self, k: int, counter) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """``k`` distinct stored samples: ``(images [k, ...], labels [k], ok [k])``."""
        seed = step_seed(self.seed, counter, SALT_REPLAY)
        index, ok = sample_without_replacement(self.filled(), k, seed)
        return tf.gather(self.images, index), tf.gather(self.labels, index), ok
