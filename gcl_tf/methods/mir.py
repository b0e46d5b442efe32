"""MIR: maximally interfered retrieval (Aljundi et al., NeurIPS 2019, "Online Continual Learning
with Maximally Interfered Retrieval"; ER-MIR of the authors' code, optimass/Maximally_Interfered_Retrieval).

ER whose replay batch is chosen instead of drawn. Each step

1. takes a virtual SGD step on the incoming batch, ``theta' = theta - lr * grad CE(batch)`` (the
   optimizer's learning rate; the model's weights do not move),
2. draws ``candidates`` samples from the reservoir memory (the authors' ``subsample``: 50) and
   scores each by how much its loss rises under the virtual step, ``CE(theta') - CE(theta)``,
3. replays the ``replay_batch_size`` highest-scoring candidates (default: the training batch
   size) with the batch in ER's update, then reservoir-inserts the batch.

The candidates are scored in inference mode (BatchNorm's moving statistics: memory slots not
filled yet enter no batch statistics). The authors' code sums the batch's mean loss and the
replayed samples'; here the update is ER's (one mean over both), so that MIR and ER differ only in
which samples they replay. Task-free; one device.
"""
from __future__ import annotations

import tensorflow as tf

from gcl_tf.methods import er
from gcl_tf.methods.base import cross_entropy
from gcl_tf.methods.configs import MIRConfig


def interference(pre_losses, post_losses, ok):
    """[C] scores: the rise of each candidate's loss under the virtual step; -inf where the draw
    is not a stored sample (``ok`` False)."""
    return tf.where(ok, post_losses - pre_losses, float("-inf"))


def most_interfered(scores, k: int):
    """Indices [k] of the ``k`` highest scores, highest first (ties: the earlier candidate)."""
    return tf.math.top_k(scores, k=k).indices


class MIR(er.ER):
    """MIR. ``memory_size``, ``replay_batch_size``: as ER's; ``candidates``: memory samples scored
    per step. See :class:`~gcl_tf.methods.base.ContinualModel` for the common keywords."""

    Config = MIRConfig
    settings: MIRConfig

    style = ("#393b79", "h")
    supports_distribution = False
    test_settings = {"memory_size": 20, "candidates": 10}

    @property
    def candidates(self) -> int:
        """Memory samples scored per step (``candidates``, at most the memory's size)."""
        return min(self.settings.candidates, self.settings.memory_size)

    def losses(self, weights, x, y, training=False):
        """Per-sample cross-entropy [N] of the network with trainable ``weights`` (a list of tensors)."""
        fixed = [tf.convert_to_tensor(v) for v in self.network.non_trainable_variables]
        logits, _ = self.network.stateless_call(weights, fixed, x, training=training)
        return cross_entropy(y, logits)

    def virtual_step(self, x, y):
        """``(weights, weights after one SGD step on x, y)``, as lists of tensors."""
        weights = [tf.convert_to_tensor(v) for v in self.network.trainable_variables]
        with tf.GradientTape() as tape:
            tape.watch(weights)
            loss = tf.reduce_mean(self.losses(weights, x, y, training=True))
        rate = tf.cast(self.optimizer.learning_rate, tf.float32)  # read in the step: a new rate applies
        stepped = [w if g is None else w - rate * g for w, g in zip(weights, tape.gradient(loss, weights))]
        return weights, stepped

    def retrieve(self, x, y, size):
        drawn = self.memory.sample(self.candidates, self.step_counter)
        weights, stepped = self.virtual_step(x, y)
        scores = interference(self.losses(weights, drawn["images"], drawn["labels"]),
                              self.losses(stepped, drawn["images"], drawn["labels"]), drawn["ok"])
        chosen = most_interfered(scores, min(size, self.candidates))
        return {name: tf.gather(value, chosen) for name, value in drawn.items()}
