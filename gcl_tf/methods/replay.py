"""The replay methods' mean over the global batch (ER, DER++, ER-ACE, MIR) and the one rule for
what they log.

On ``R`` replicas (``train.distribute``) each replica holds ``B / R`` samples of the global batch
and computes its *share* of a mean over all of them: the sum of its own (weighted) terms divided
by the count over every replica. The replicas' gradients are summed, so the shares' gradients sum
to the global mean's. Keras averages the logged values over the replicas (``reduce_per_replica``,
``"mean"`` under a MirroredStrategy): a method logs ``R`` times its share (:func:`logged`), whose
average over the replicas is the global mean; a replica's own mean would average to something
else whenever the replicas' counts differ (a replay batch partly empty). On one device the share
is the mean and the logged value is it.
"""
from __future__ import annotations

import tensorflow as tf

from gcl_tf.distribute import all_sum, num_replicas


def global_count(weights):
    """The sum of ``weights`` [n] over every replica's samples (a collective under a strategy:
    order it with the others)."""
    return all_sum(tf.reduce_sum(weights))


def replica_share(values, count, weights=None):
    """This replica's share of the mean of ``values`` [n] over the global batch:
    ``sum(weights * values) / max(count, 1)``, ``count`` the weights' sum over all replicas (a
    number, or :func:`global_count`); 0 when ``count`` is 0 (a replay batch not drawn yet)."""
    total = tf.reduce_sum(values if weights is None else weights * values)
    return total / tf.maximum(tf.cast(count, total.dtype), 1.0)


def logged(shares: dict) -> dict:
    """``{name: R * share}``: what a replica logs so that Keras's average over the replicas is the
    global value."""
    replicas = num_replicas()
    return {name: share * replicas for name, share in shares.items()}
