"""ER-ACE: experience replay with asymmetric cross-entropy (Caccia et al., ICLR 2022, "New Insights
on Reducing Abrupt Representation Change in Online Continual Learning").

ER with two losses instead of one: the incoming batch's cross-entropy over the classes present in
it (the logits of the other classes masked out before the softmax), so that new data does not push
down the logits of classes it does not hold, and the replay batch's cross-entropy over all
classes; each a mean over its batch, summed (the replay term is zero while the memory is empty).
The classes present are those of the whole incoming batch (all replicas). Each batch goes through
the network on its own, as in the authors' code, or both in one run (``one_pass``). Task-free; runs distributed.

The authors' code (pclucas14/AML, and mammoth's ``models/er_ace.py``) also leaves unmasked the
classes from the largest class index seen so far on (not yet seen when classes arrive in index
order); here, as in the paper, only the classes present stay.
"""
from __future__ import annotations

import tensorflow as tf

from gcl_tf import salts
from gcl_tf.distribute import gather_in_order, num_replicas
from gcl_tf.memory import replay_batch
from gcl_tf.methods import er
from gcl_tf.methods.base import cross_entropy, mask_logits, present_classes
from gcl_tf.methods.configs import ERACEConfig
from gcl_tf.methods.replay import forward, global_count, logged, replica_share
from gcl_tf.precision import float32


class ERACE(er.ER):
    """ER-ACE. ``memory_size``, ``replay_batch_size``: as ER's. See
    :class:`~gcl_tf.methods.base.ContinualModel` for the common keywords."""

    Config = ERACEConfig
    settings: ERACEConfig

    label = "ER-ACE"
    style = ("#17becf", ">")

    def learn(self, x, y):
        batch, replicas = x.shape[0], num_replicas()
        # Collectives must run in the same order on every replica: chain them by dependencies.
        stream_x, stream_y = gather_in_order(x, y)  # the global batch: the memory, the classes present
        present = present_classes(stream_y, self.num_classes)
        replay = replay_batch(self.memory, self.replay_size(batch * replicas), self.step_counter)
        ok = tf.cast(replay["ok"], tf.float32)
        with tf.control_dependencies([stream_x, stream_y]):
            replayed = global_count(ok)  # over all replicas
        batches = [self.augmented(x), self.augmented(replay["images"], salts.SECOND_AUGMENT)]
        with tf.GradientTape() as tape:
            incoming_logits, replay_logits = forward(self, batches, self.settings.one_pass)
            logits = mask_logits(float32(incoming_logits), present)
            incoming = replica_share(cross_entropy(y, logits), batch * replicas)
            replay_losses = cross_entropy(replay["labels"], replay_logits)
            replay_loss = replica_share(replay_losses, replayed, ok)
            replica_loss = incoming + replay_loss  # summed over replicas
        self.apply_gradients(tape, replica_loss)
        self.memory.add(stream_x, stream_y)
        return logged({"loss": replica_loss, "loss_stream": incoming, "loss_replay": replay_loss})
