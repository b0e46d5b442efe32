"""DER++: dark experience replay (Buzzega et al., NeurIPS 2020, "Dark Experience for General
Continual Learning: a Strong, Simple Baseline"), as the authors' code (mammoth, ``models/derpp.py``).

The reservoir memory keeps, with each sample, the logits the network gave it when it came in
(before that step's update). A step minimises

    CE(incoming batch) + alpha * MSE(logits on replay batch 1, their stored logits)
                       + beta * CE(replay batch 2, their labels),

the two replay batches drawn independently (``replay_batch_size`` samples each, the training
batch size by default), each loss a mean over its batch (the MSE over samples and classes); the
replay terms are zero while the memory is empty. Each batch goes through the network on its own,
as in the authors' code (BatchNorm statistics per batch), or all three in one run (``one_pass``).
Task-free; runs distributed.
"""
from __future__ import annotations

import tensorflow as tf

from gcl_tf import salts
from gcl_tf.distribute import all_sum, gather_in_order, num_replicas
from gcl_tf.memory import replay_batch
from gcl_tf.methods import er
from gcl_tf.methods.base import cross_entropy
from gcl_tf.methods.configs import DERPPConfig
from gcl_tf.methods.replay import forward, logged, replica_share
from gcl_tf.precision import float32


def logit_mse(logits, stored):
    """Per-sample mean over classes of ``(logits - stored)^2``   [N] (float32)."""
    return tf.reduce_mean(tf.square(float32(logits) - stored), axis=-1)


class DERPP(er.ER):
    """DER++. ``memory_size``, ``replay_batch_size``: as ER's (each of the two replay batches);
    ``alpha``, ``beta``: the weights of the logit and label replay terms. See
    :class:`~gcl_tf.methods.base.ContinualModel` for the common keywords."""

    Config = DERPPConfig
    settings: DERPPConfig

    label = "DER++"
    style = ("#bcbd22", "<")
    # around the values the paper selects (its appendix: alpha 0.1 to 1, beta 0.5 or 1)
    tune_grid = {"method.alpha": [0.1, 0.2, 0.5, 1.0], "method.beta": [0.5, 1.0]}

    @classmethod
    def memory_fields(cls, num_classes):
        return {"logits": ((num_classes,), "float32")}

    def learn(self, x, y):
        batch, replicas = x.shape[0], num_replicas()
        size = self.replay_size(batch * replicas)
        first = replay_batch(self.memory, size, self.step_counter)  # for the logits term
        second = replay_batch(self.memory, size, self.step_counter, salts.SECOND_REPLAY)  # for the labels term
        ok1, ok2 = tf.cast(first["ok"], tf.float32), tf.cast(second["ok"], tf.float32)
        # Collectives in the same order on every replica: the counts, the gathers, the gradients.
        counts = all_sum(tf.stack([tf.reduce_sum(ok1), tf.reduce_sum(ok2)]))  # over all replicas
        batches = [self.augmented(x),  # the memory keeps x as it came, with its logits
                   self.augmented(first["images"], salts.SECOND_AUGMENT),
                   self.augmented(second["images"], salts.THIRD_AUGMENT)]
        s = self.settings
        with tf.GradientTape() as tape:
            logits, first_logits, second_logits = forward(self, batches, s.one_pass)
            terms = {
                "loss_stream": replica_share(cross_entropy(y, logits), batch * replicas),
                "loss_logits": s.alpha * replica_share(logit_mse(first_logits, first["logits"]), counts[0], ok1),
                "loss_labels": s.beta * replica_share(cross_entropy(second["labels"], second_logits),
                                                         counts[1], ok2),
            }
            replica_loss = tf.add_n(list(terms.values()))  # summed over replicas
        with tf.control_dependencies([counts]):
            stream_x, stream_y, stream_logits = gather_in_order(x, y, tf.stop_gradient(float32(logits)))
        with tf.control_dependencies([stream_x, stream_y, stream_logits]):
            self.apply_gradients(tape, replica_loss)
        self.memory.add(stream_x, stream_y, logits=stream_logits)  # the logits before this step's update
        return logged({"loss": replica_loss, **terms})
