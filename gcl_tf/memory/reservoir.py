"""A fixed-capacity episodic memory filled by reservoir sampling (ER, MER, DER++, ER-ACE; GCL's
graph memory builds on it), held in tf.Variables and updated inside the compiled train step, and
:func:`replay_batch`, a replay batch drawn from it on one device or many."""
from __future__ import annotations

import keyword

import tensorflow as tf

from gcl_tf import salts
from gcl_tf.distribute import num_replicas, replica_rows
from gcl_tf.memory.state import (
    sample_without_replacement,
    scatter_update,
    state_variable,
    step_seed,
)


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
    """Fixed-capacity episodic memory of images and labels filled by reservoir sampling.

    ``extra``: more fields kept for each sample, ``{name: (shape, dtype)}`` (DER++ keeps its
    logits: ``{"logits": ([K], tf.float32)}``); each is a ``[capacity, *shape]`` variable named
    after the field (``memory.logits``), given to :meth:`add` as a keyword and returned by
    :meth:`sample` under its name. The variables of images, labels and counters keep their names
    whatever the extra fields, so checkpoints of a memory without them restore.
    """

    def __init__(self, capacity: int, image_shape, seed: int = 0, extra=None, name: str = "memory"):
        super().__init__(name=name)
        if capacity < 1:
            raise ValueError("memory capacity must be at least 1")
        self.capacity = int(capacity)
        self.image_shape = tuple(int(d) for d in image_shape)
        self.seed = int(seed)
        extra = dict(extra or {})
        for field in extra:
            taken = field in ("images", "labels", "slots", "ok", "num_seen", "num_filled") or hasattr(self, field)
            if not field.isidentifier() or keyword.iskeyword(field) or taken:
                raise ValueError(f"memory field {field!r}: allowed: an identifier that is not a name of the memory's")
        self.extra_fields = tuple(extra)
        with self.name_scope:
            self.images = state_variable(tf.zeros((self.capacity,) + self.image_shape), "images")
            self.labels = state_variable(tf.zeros([self.capacity], tf.int32), "labels")
            self.num_seen = state_variable(tf.constant(0, tf.int64), "num_seen")
            self.num_filled = state_variable(tf.constant(0, tf.int32), "num_filled")
            for field, (shape, dtype) in extra.items():
                shape = [self.capacity] + [int(d) for d in shape]
                setattr(self, field, state_variable(tf.zeros(shape, tf.as_dtype(dtype)), field))

    def fields(self) -> dict:
        """``{name: variable}`` of every per-sample field: images, labels and the extra ones."""
        return {"images": self.images, "labels": self.labels, **{f: getattr(self, f) for f in self.extra_fields}}

    def filled(self) -> tf.Tensor:
        """[M] bool: slots holding a sample."""
        return tf.range(self.capacity) < self.num_filled

    def reservoir_slots(self, batch_size: int) -> tf.Tensor:
        seed = step_seed(self.seed, self.num_seen, salts.RESERVOIR)
        return reservoir_slots(self.num_seen, batch_size, self.capacity, seed)

    def write(self, slots, images, labels, **extra) -> None:
        """Store sample ``i`` (its image, label and extra fields) in ``slots[i]`` where
        ``slots[i] >= 0``; advance the stream."""
        if set(extra) != set(self.extra_fields):
            raise ValueError(f"memory fields: expected {sorted(self.extra_fields)}, got {sorted(extra)}")
        keep = slots >= 0
        index = tf.boolean_mask(slots, keep)[:, None]  # [k, 1]
        values = {"images": images, "labels": tf.cast(labels, tf.int32), **extra}
        for field, variable in self.fields().items():
            value = tf.cast(values[field], variable.dtype)
            scatter_update(variable, index, tf.boolean_mask(value, keep))
        batch = tf.cast(tf.shape(slots)[0], tf.int64)
        self.num_seen.assign_add(batch)
        self.num_filled.assign(tf.cast(tf.minimum(self.num_seen, self.capacity), tf.int32))

    def add(self, images, labels, **extra) -> tf.Tensor:
        """Reservoir-insert a batch (``extra``: a value ``[B, *shape]`` for each extra field);
        returns the slots used ([B] int32, -1 = not stored)."""
        slots = self.reservoir_slots(images.shape[0])
        self.write(slots, images, labels, **extra)
        return slots

    def sample(self, k: int, counter, salt: int = salts.REPLAY) -> dict:
        """``k`` distinct stored samples, drawn from the run's seed, ``counter`` and ``salt``:
        ``{"slots": [k] int32, "ok": [k] bool, "images": [k, ...], "labels": [k], <extra>: [k,
        ...]}``; ``ok`` is False for draws beyond the filled slots (their values are to be
        ignored)."""
        seed = step_seed(self.seed, counter, salt)
        index, ok = sample_without_replacement(self.filled(), k, seed)
        drawn = {"slots": index, "ok": ok}
        for field, variable in self.fields().items():
            drawn[field] = tf.gather(variable, index)
        return drawn


def replay_batch(memory: ReservoirMemory, size: int, counter, salt: int = salts.REPLAY) -> dict:
    """This replica's part of a replay batch of ``size`` samples (over all replicas), as
    :meth:`ReservoirMemory.sample` returns it.

    Every replica holds the same memory and draws the same ``size`` slots (the same seed,
    ``counter`` and ``salt``); on ``R`` replicas replica ``r`` keeps the ``r``-th consecutive
    slice of ``size / R`` of them, as the global batch is cut (gcl_tf/distribute.py), so the
    replicas together replay what one device replays. ``size`` must split evenly over the
    replicas (a method checks it in ``check_replicas``). No collective: nothing to order.
    """
    drawn = memory.sample(size, counter, salt)
    replicas = num_replicas()
    if replicas == 1:
        return drawn
    if size % replicas:
        raise ValueError(f"a replay batch of {size} does not split evenly over {replicas} replicas")
    rows = replica_rows(size, size // replicas)
    return {field: tf.gather(value, rows) for field, value in drawn.items()}
