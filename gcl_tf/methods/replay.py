"""The replay methods' mean over the global batch (ER, DER++, ER-ACE, MIR), the one rule for
what they log, and how a step runs the network over several batches (:func:`forward`).

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


def forward(model, batches, one_pass: bool):
    """The logits of each of ``batches`` (image tensors) in training mode: one run of ``model`` per
    batch (the authors' code of DER++ and ER-ACE: BatchNorm normalises each batch by its own
    statistics and updates its moving averages once per batch), or, ``one_pass``, one run over
    their concatenation, split back (every batch normalised by the statistics of them all, as ER's
    step; the moving averages then match what the layers were trained on)."""
    if not one_pass:
        return [model(batch, training=True) for batch in batches]
    logits = model(tf.concat(batches, axis=0), training=True)
    return tf.split(logits, [int(batch.shape[0]) for batch in batches], axis=0)
