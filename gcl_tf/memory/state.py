"""The building blocks of every episodic memory: state variables a compiled step updates in place
(shapes never change, so the step traces once) and stateless randomness keyed on the run's seed
and a counter (the same seed and stream give the same memory; a restored checkpoint continues
exactly)."""
from __future__ import annotations

import tensorflow as tf


def step_seed(seed: int, counter, salt: int) -> tf.Tensor:
    """A stateless seed [2] int32 (TFP's seed dtype) from the run seed, a counter and a purpose salt."""
    base = tf.constant([seed, salt], dtype=tf.int64)
    folded = tf.random.experimental.stateless_fold_in(base, tf.cast(counter, tf.int64))
    return tf.cast(folded, tf.int32)


def state_variable(initial, name: str, dtype=None) -> tf.Variable:
    """A non-trainable state variable (memory, counters).

    Under a tf.distribute strategy every replica keeps its own copy (ON_READ) and updates it
    in place; the replicas apply identical updates, so the copies stay equal. Reads outside the
    replicas and checkpoints take the first replica's copy.
    """
    return tf.Variable(
        initial, trainable=False, name=name, dtype=dtype,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
    )


def scatter_update(variable, indices, updates) -> None:
    """``variable[indices] = updates`` in place (a distributed copy is reassigned whole:
    replica-local variables have no scatter)."""
    if isinstance(variable, tf.distribute.DistributedValues):
        variable.assign(tf.tensor_scatter_nd_update(variable, indices, updates))
    else:
        variable.scatter_nd_update(indices, updates)


def sample_without_replacement(valid, k: int, seed) -> tuple[tf.Tensor, tf.Tensor]:
    """Draw ``k`` distinct indices uniformly among the True entries of ``valid`` [M].

    Returns ``(indices [k] int32, ok [k] bool)``; ``ok`` is False for draws beyond the number of
    valid entries (those indices point at invalid slots and must be ignored).
    """
    scores = tf.random.stateless_uniform(tf.shape(valid), seed=seed)  # [M]
    scores = tf.where(valid, scores, -1.0)
    top, indices = tf.math.top_k(scores, k=k)
    return indices, top >= 0.0
