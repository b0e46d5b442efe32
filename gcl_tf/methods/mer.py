"""MER: meta-experience replay (Riemer et al. 2019), Algorithm 1, following the authors' code
(``model/meralg1.py`` of mattriemer/MER).

Every incoming example is learned on its own, in order. For each of ``batches_per_example``
batches (the original's ``batches_per_example``, ``s``), a batch is formed by the example and
``replay_batch_size`` samples drawn from a reservoir memory; the batch's samples are learned one
at a time by plain SGD steps (batch size 1, the SGD optimizer's learning rate), and the weights are then
pulled back towards their value before the batch (within-batch Reptile meta-update):

    theta <- theta_before_batch + beta * (theta_after_batch - theta_before_batch).

After the ``s`` batches, the across-batch meta-update ``theta <- theta_before_example + gamma *
(theta - theta_before_example)`` is applied and the example is offered to the reservoir memory.

The whole step stays one compiled function with fixed shapes: the incoming batch's examples are
unrolled (a static count), the batches and the single-sample steps are ``tf.while_loop`` over
weights carried as tensors (``keras.Model.stateless_call``), and the weights are written back once
at the end of the step. Memory draws are stateless (seeded by the run seed, the step, the example
and the batch): distinct samples within a batch (the original may repeat one), and memory slots
not filled yet are skipped. Task-free.

Only plain SGD is defined (as in the original): the optimizer must be SGD (``train.optimizer: sgd``). BatchNorm
with batches of one sample is ill-defined; MER is meant for the MLP (the paper runs it on the
MNIST variants only).
"""
from __future__ import annotations

import keras
import tensorflow as tf

from gcl_tf.backbones import classifier
from gcl_tf.errors import ConfigError
from gcl_tf.memory import ReservoirMemory
from gcl_tf.methods.base import ContinualModel, cross_entropy
from gcl_tf.methods.configs import MER_NO_AVERAGE, MERConfig

# ----------------------------------------------------------------------------- pure math


def reptile_update(before, after, rate):
    """``before + rate * (after - before)`` for lists of tensors."""
    return [b + rate * (a - b) for b, a in zip(before, after)]


# ----------------------------------------------------------------------------- method


class MER(ContinualModel):
    """MER (Algorithm 1). ``memory_size``: the reservoir memory; ``replay_batch_size``: memory
    samples with each example; ``batches_per_example``: s; ``beta``, ``gamma``: the within- and
    across-batch meta-learning rates. Compile it with ``keras.optimizers.SGD``: its learning rate
    is the size of the single-sample steps. See :class:`~gcl_tf.methods.base.ContinualModel` for
    the common keywords."""

    Config = MERConfig
    settings: MERConfig

    style = ("#e377c2", "X")
    task_free = True
    test_settings = {"memory_size": 20, "replay_batch_size": 2, "batches_per_example": 1}
    tune_grid = {"train.optimizer": ["sgd"],  # plain SGD steps only
                 "method.beta": [0.01, 0.03, 0.1, 0.3, 1.0]}  # the within-batch meta-learning rate

    def __init__(self, backbone=None, *, num_classes, **keys):
        super().__init__(backbone, num_classes=num_classes, **keys)
        s = self.settings
        self.network = classifier(self.default_backbone(backbone), self.image_shape, self.num_classes)
        self.memory = ReservoirMemory(s.memory_size, self.image_shape, seed=self.seed)
        self.learning_rate = None  # the SGD optimizer's, set by compile

    def compile(self, optimizer="sgd", **kwargs):
        """As any method's, with plain SGD only: its learning rate sizes MER's single-sample steps."""
        optimizer = keras.optimizers.get(optimizer)
        if type(optimizer) is not keras.optimizers.SGD or float(optimizer.momentum) != 0.0:
            raise ConfigError(f"optimizer: mer uses plain SGD steps (MER Algorithm 1), got "
                              f"{type(optimizer).__name__}; allowed: keras.optimizers.SGD without momentum")
        if optimizer.use_ema:
            raise ConfigError(MER_NO_AVERAGE)
        super().compile(optimizer=optimizer, **kwargs)
        self.learning_rate = float(tf.convert_to_tensor(optimizer.learning_rate))

    def call(self, x, training=False):
        return self.network(x, training=training)

    def sgd_step(self, trainable, non_trainable, x, y, scale):
        """One plain SGD step of size ``learning_rate * scale`` on a batch; returns new weights and the loss."""
        with tf.GradientTape() as tape:
            tape.watch(trainable)
            logits, new_non_trainable = self.network.stateless_call(trainable, non_trainable, x, training=True)
            loss = tf.reduce_mean(cross_entropy(y, logits))
        grads = tape.gradient(loss, trainable)
        step = self.learning_rate * scale
        trainable = [w if g is None else w - step * g for w, g in zip(trainable, grads)]
        non_trainable = [tf.where(scale > 0, new, old) for new, old in zip(new_non_trainable, non_trainable)]
        return trainable, non_trainable, loss

    def learn_example(self, trainable, non_trainable, x, y, counter):
        """MER Algorithm 1 for one example ``x`` [1, ...], ``y`` [1]; returns the new weights and mean loss."""
        k = min(self.settings.replay_batch_size, self.settings.memory_size)
        before = trainable

        def batch_body(j, trainable, non_trainable, loss_sum):
            drawn = self.memory.sample(k, counter * self.settings.batches_per_example + tf.cast(j, tf.int64))
            mem_x, mem_y, ok = drawn["images"], drawn["labels"], drawn["ok"]
            bx = tf.concat([x, mem_x], axis=0)
            by = tf.concat([y, mem_y], axis=0)
            bw = tf.concat([tf.ones([1]), tf.cast(ok, tf.float32)], axis=0)
            start = trainable

            def sample_body(r, trainable, non_trainable, loss_sum):
                trainable, non_trainable, loss = self.sgd_step(
                    trainable, non_trainable, bx[r:r + 1], by[r:r + 1], bw[r]
                )
                return r + 1, trainable, non_trainable, loss_sum + bw[r] * loss

            _, trainable, non_trainable, batch_loss = tf.while_loop(
                lambda r, *_: r < k + 1, sample_body, (tf.constant(0), trainable, non_trainable, tf.constant(0.0))
            )
            trainable = reptile_update(start, trainable, self.settings.beta)  # within-batch meta-update
            return j + 1, trainable, non_trainable, loss_sum + batch_loss / tf.reduce_sum(bw)

        _, trainable, non_trainable, loss_sum = tf.while_loop(
            lambda j, *_: j < self.settings.batches_per_example,
            batch_body,
            (tf.constant(0), trainable, non_trainable, tf.constant(0.0)),
        )
        trainable = reptile_update(before, trainable, self.settings.gamma)  # across-batch meta-update
        return trainable, non_trainable, loss_sum / self.settings.batches_per_example

    def learn(self, x, y):
        batch = int(x.shape[0])
        trainable = [tf.convert_to_tensor(v) for v in self.network.trainable_variables]
        non_trainable = [tf.convert_to_tensor(v) for v in self.network.non_trainable_variables]
        losses = []
        for i in range(batch):  # static: examples one by one, each then offered to the memory
            counter = self.step_counter * batch + i
            trainable, non_trainable, loss = self.learn_example(
                trainable, non_trainable, x[i:i + 1], y[i:i + 1], counter
            )
            losses.append(loss)
            self.memory.add(x[i:i + 1], y[i:i + 1])
        for variable, value in zip(self.network.trainable_variables, trainable):
            variable.assign(value)
        for variable, value in zip(self.network.non_trainable_variables, non_trainable):
            variable.assign(value)
        return {"loss": tf.add_n(losses) / batch}
