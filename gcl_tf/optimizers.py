"""The optimizer of a run's ``train`` section (:func:`make_optimizer`), and the weights' moving average
(``train.ema_momentum``, Keras's ``use_ema``) as a continual learner reads it.

A Keras optimizer built with ``use_ema=True`` keeps ``avg = m avg + (1 - m) w`` of every trainable
weight, updated in its own ``apply``, and ``keras.Model.fit`` overwrites the weights with the
averages when it returns. A continual learner fits once per task and must go on learning from its
own weights, as the methods that evaluate an average do (MKD's teacher, a temporal ensemble): so
here ``fit`` keeps the learned weights (:func:`keeping_learned_weights`) and the averages are
swapped in only for an evaluation span (:func:`averages_in_place`, from
:meth:`~gcl_tf.methods.base.ContinualModel.evaluation_scope`), then swapped back.
"""
from __future__ import annotations

import contextlib

import keras
import tensorflow as tf


def make_optimizer(train_config) -> keras.optimizers.Optimizer:
    common = {"learning_rate": train_config.learning_rate}
    if train_config.ema_momentum is not None:  # the weights' moving average, read by evaluations
        common.update(use_ema=True, ema_momentum=train_config.ema_momentum)
    if train_config.optimizer == "sgd":
        return keras.optimizers.SGD(**common)
    if train_config.optimizer == "adam":
        return keras.optimizers.Adam(**common)
    if train_config.optimizer == "adamw":  # decoupled: w -= learning_rate * weight_decay * w, as torch's AdamW
        return keras.optimizers.AdamW(weight_decay=train_config.weight_decay, **common)
    raise ValueError(f"unknown optimizer {train_config.optimizer!r}")


def averaging_optimizer(optimizer):
    """The optimizer that keeps the averages (the inner one of a LossScaleOptimizer), or None
    when there is none or it keeps no average."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer = optimizer.inner_optimizer
    if optimizer is None or not getattr(optimizer, "use_ema", False):
        return None
    return optimizer


@contextlib.contextmanager
def keeping_learned_weights(optimizer):
    """Within it, the end of ``keras.Model.fit`` leaves the learned weights in place (Keras would
    overwrite them with the averages: ``finalize_variable_values``); ``optimizer``: as
    :func:`averaging_optimizer` gives it (None: nothing to keep)."""
    if optimizer is None:
        yield
        return
    optimizer.finalize_variable_values = lambda var_list: None  # the instance's, over the class's
    try:
        yield
    finally:
        del optimizer.finalize_variable_values


@contextlib.contextmanager
def averages_in_place(optimizer):
    """Within it the weights hold their averages (``optimizer``: as :func:`averaging_optimizer`
    gives it; None: the weights as they are); the learned weights come back at its end. Each
    weight and its average are exchanged in place (in a strategy's cross-replica context each
    assignment reaches every replica's copy), and exchanged back."""
    pairs = [] if optimizer is None else [
        (w, a) for w, a in zip(optimizer._trainable_variables, optimizer._model_variables_moving_average)
        if a is not None]

    def exchange():
        for weight, average in pairs:
            learned = tf.identity(weight.value)
            weight.assign(average.value)
            average.assign(learned)

    exchange()
    try:
        yield
    finally:
        exchange()


def average_of(optimizer, variable):
    """The moving average ``optimizer`` keeps of the trainable ``variable``."""
    for weight, average in zip(optimizer._trainable_variables, optimizer._model_variables_moving_average):
        if weight is variable:
            return average
    raise ValueError(f"{variable.path} is not among the weights the optimizer averages")


@contextlib.contextmanager
def averaged_weights(layer, optimizer):
    """Within it every read of ``layer``'s trainable weights reads their moving averages (Keras's
    ``StatelessScope``: nothing is assigned, BatchNorm's statistic updates are dropped), with no
    gradient: a whole forward pass of what the average answers, inside the compiled step."""
    mapping = [(v, tf.stop_gradient(average_of(optimizer, v).value)) for v in layer.trainable_variables]
    with keras.StatelessScope(state_mapping=mapping):
        yield


def distillation_loss(teacher_logits, student_logits, temperature: float, weights=None):
    """Knowledge distillation (Hinton et al. 2015; MKD's loss, Michel et al. 2024): the mean over rows of
    ``T^2 KL(softmax(t / T) || softmax(s / T))`` (``weights`` [N]: a weighted mean, e.g. 0 for rows
    that do not count). The teacher's side carries no gradient; T^2 keeps the gradient's scale as T varies."""
    teacher = tf.nn.log_softmax(tf.stop_gradient(tf.cast(teacher_logits, tf.float32)) / temperature)
    student = tf.nn.log_softmax(tf.cast(student_logits, tf.float32) / temperature)
    kl = tf.reduce_sum(tf.exp(teacher) * (teacher - student), axis=-1)  # [N]
    if weights is None:
        return temperature ** 2 * tf.reduce_mean(kl)
    weights = tf.cast(weights, tf.float32)
    return temperature ** 2 * tf.reduce_sum(kl * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
