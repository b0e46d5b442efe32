"""The base class of every method: a ``keras.Model`` whose ``train_step`` is the whole online update.

A method implements
- ``learn(x, y) -> dict``: one online update on a minibatch (inside the compiled step); returns
  the scalar loss terms to log;
- ``predict_log_probs(x, class_mask) -> [N, K]``: class log-probabilities restricted to the
  classes allowed by ``class_mask`` ([N, K] or [K] bool);
and, when it needs task boundaries (``task_free = False``), ``on_task_start`` / ``on_task_end``,
which the driver calls through callbacks. ``fit``, ``evaluate``, callbacks and TensorBoard keep
working as in any Keras model. Evaluation loops run inside ``with model.evaluation_scope():``, a
span in which the model's state does not change, so that a method may compute what depends only
on that state once for all test batches (``begin_evaluation`` / ``end_evaluation``).
"""
from __future__ import annotations

import contextlib

import keras
import tensorflow as tf

from gcl_tf.data.streams import to_float
from gcl_tf.memory import state_variable
from gcl_tf.precision import float32, wrap_optimizer

NEG_INF = -1e9


def make_optimizer(train_config) -> keras.optimizers.Optimizer:
    if train_config.optimizer == "sgd":
        return keras.optimizers.SGD(learning_rate=train_config.learning_rate)
    if train_config.optimizer == "adam":
        return keras.optimizers.Adam(learning_rate=train_config.learning_rate)
    raise ValueError(f"unknown optimizer {train_config.optimizer!r}")


def mask_logits(logits, class_mask):
    """Logits of classes outside ``class_mask`` set to a large negative value."""
    class_mask = tf.broadcast_to(tf.cast(class_mask, tf.bool), tf.shape(logits))
    return tf.where(class_mask, logits, tf.cast(NEG_INF, logits.dtype))


def cross_entropy(labels, logits):
    """Per-sample softmax cross-entropy [N], in float32 (logits of a mixed-precision layer are cast)."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(labels, tf.int32), logits=float32(logits))


def _for_keras_reduction(logs: dict) -> dict:
    """Under MultiWorkerMirroredStrategy Keras averages step outputs across workers *along axis 0*,
    which fails on scalars: give each log a leading axis of 1 there (the average is a scalar)."""
    if isinstance(tf.distribute.get_strategy(), tf.distribute.MultiWorkerMirroredStrategy):
        return {name: tf.reshape(value, [1]) for name, value in logs.items()}
    return logs


class ContinualModel(keras.Model):
    """Base class; see the module docstring."""

    #: False for methods that need task boundaries (the driver provides them).
    task_free = True
    #: True for methods whose step runs under a tf.distribute strategy (train.distribute).
    supports_distribution = False

    def __init__(self, config, input_shape, num_classes: int, **kwargs):
        # The method itself computes in float32 whatever train.mixed_precision gives its layers
        # (gcl_tf/precision.py): no autocast of its own weights, float32 around the layers.
        kwargs.setdefault("dtype", "float32")
        super().__init__(name=config.method.name, **kwargs)
        self.config = config
        self.method_config = config.method
        self.image_shape = tuple(int(d) for d in input_shape)
        self.num_classes = int(num_classes)
        self.seed = int(config.seed)
        # Counts training steps; keys the stateless randomness of every step.
        self.step_counter = state_variable(tf.constant(0, tf.int64), "step_counter")
        self.current_task = state_variable(tf.constant(0, tf.int32), "current_task")
        # The first step (1-based) whose loss terms or updated weights were NaN or infinite; 0 while
        # every step was finite. Set inside the compiled step; the driver reads it only when it saves
        # a checkpoint (no per-step host sync) and stops a diverged run.
        self.first_nonfinite_step = state_variable(tf.constant(0, tf.int64), "first_nonfinite_step")
        self.accuracy_tracker = keras.metrics.Mean(name="accuracy")
        self.eval_loss_tracker = keras.metrics.Mean(name="loss")

    # ------------------------------------------------------------------ to implement
    def learn(self, x, y) -> dict:
        raise NotImplementedError

    def predict_log_probs(self, x, class_mask):
        """Default: log-softmax of the masked logits of ``self(x)``."""
        logits = float32(self(x, training=False))
        return tf.nn.log_softmax(mask_logits(logits, class_mask), axis=-1)

    def on_task_start(self, task_index: int, classes) -> None:
        self.current_task.assign(task_index)

    def on_task_end(self, task_index: int, dataset) -> None:
        """Called after a task's last step, before it is evaluated. ``dataset`` is its stream."""

    def begin_evaluation(self) -> None:
        """Entering an evaluation span (see :meth:`evaluation_scope`); default: nothing."""

    def end_evaluation(self) -> None:
        """Leaving an evaluation span; default: nothing."""

    @contextlib.contextmanager
    def evaluation_scope(self):
        """A span of predictions during which the model's weights and memory do not change (no
        training step, no restore in between): a method may then compute what depends only on
        them once, at the first test batch, and reuse it (GCL: the memory's embeddings). Outside
        a scope every prediction computes everything afresh."""
        self.begin_evaluation()
        try:
            yield self
        finally:
            self.end_evaluation()

    # ------------------------------------------------------------------ Keras plumbing
    @property
    def metrics(self):
        return [self.accuracy_tracker, self.eval_loss_tracker]

    @classmethod
    def check_replicas(cls, config, replicas: int) -> None:
        """Raise a ConfigError if the method's own batch sizes do not split over ``replicas``."""

    def compile_for_training(self, train_config) -> None:
        """Compile with the configured optimizer (in a LossScaleOptimizer under mixed_float16) and
        build its slots (so the step traces once); ``jit_compile: auto`` is decided here, for the
        device and strategy the model is built under (gcl_tf/devices.py)."""
        from gcl_tf.devices import resolve_jit_compile

        self.compile(
            optimizer=wrap_optimizer(make_optimizer(train_config), train_config.mixed_precision),
            jit_compile=resolve_jit_compile(train_config.jit_compile, deterministic=train_config.deterministic or None),
            steps_per_execution=train_config.steps_per_execution,
        )
        self.optimizer.build(self.trainable_variables)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Skip Keras's symbolic build: every variable of a method exists after construction and
        ``compile_for_training``. Under a strategy Keras would average a first input batch over
        the replicas to build with it, a collective that fails in eager mode under
        MultiWorkerMirroredStrategy."""

    def _static_batch(self, tensors, global_batch: int):
        """Give the batch dimension its static size where a distributed input lost it (each
        replica gets ``global_batch / R`` samples): fixed shapes keep the step from retracing."""
        from gcl_tf.distribute import num_replicas

        if tensors[0].shape[0] is not None:
            return tensors
        local = global_batch // num_replicas()
        return [tf.ensure_shape(t, [local] + t.shape[1:].as_list()) for t in tensors]

    def train_step(self, data):
        x, y = self._static_batch(list(data[:2]), self.config.train.batch_size)
        logs = self.learn(to_float(x), tf.cast(y, tf.int32))
        self.step_counter.assign_add(1)
        self.record_nonfinite(logs)
        return _for_keras_reduction(logs)

    def record_nonfinite(self, logs) -> None:
        """Flag this step in ``first_nonfinite_step`` (if none was flagged yet) when a logged loss
        term or a trainable weight is not finite. A few reductions, no host transfer."""
        checks = [tf.reduce_all(tf.math.is_finite(tf.cast(v, tf.float32))) for v in logs.values()]
        checks += [tf.reduce_all(tf.math.is_finite(v)) for v in self.trainable_variables]
        finite = tf.reduce_all(tf.stack(checks))
        first = self.first_nonfinite_step
        first.assign(tf.where(tf.logical_and(tf.equal(first, 0), tf.logical_not(finite)), self.step_counter, first))

    def test_step(self, data):
        x, y, class_mask, weight = self._static_batch(list(data), self.config.eval.batch_size)
        log_probs = self.predict_log_probs(to_float(x), class_mask)  # [N, K]
        y = tf.cast(y, tf.int32)
        correct = tf.cast(tf.equal(tf.argmax(log_probs, axis=-1, output_type=tf.int32), y), tf.float32)
        nll = -tf.gather(log_probs, y, axis=1, batch_dims=1)
        self.accuracy_tracker.update_state(correct, sample_weight=weight)
        self.eval_loss_tracker.update_state(nll, sample_weight=weight)
        return _for_keras_reduction({"accuracy": self.accuracy_tracker.result(), "loss": self.eval_loss_tracker.result()})

    def predict_step(self, data):
        x = to_float(data[0] if isinstance(data, (tuple, list)) else data)
        mask = tf.ones([self.num_classes], tf.bool)
        return tf.exp(self.predict_log_probs(x, mask))

    def apply_gradients(self, tape, loss, variables=None):
        """Gradients of ``loss`` applied by the optimizer. Under a ``LossScaleOptimizer``
        (mixed_float16) the loss is scaled (the tape's output gradient is the loss scale) and the
        optimizer unscales them and skips a step whose gradients overflowed; returns them as the
        tape gave them."""
        variables = self.trainable_variables if variables is None else variables
        scale = None
        if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
            scale = tf.cast(self.optimizer.scale_loss(tf.ones_like(loss, tf.float32)), loss.dtype)
        grads = tape.gradient(loss, variables, output_gradients=scale)
        self.optimizer.apply(grads, variables)
        return grads

    # ------------------------------------------------------------------ artifacts for the figures
    # Saved by gcl_tf.train at the end of a run (DIR/artifacts.npz) and drawn by gcl_tf.benchmark.
    def penultimate(self, x):
        """Features ``[N, D]`` read by the last linear layer (default: the backbone of ``self.network``)."""
        network = getattr(self, "network", None)
        if network is None:
            return None
        backbone = next((layer for layer in network.layers if isinstance(layer, keras.Model)), None)
        return None if backbone is None else backbone(x, training=False)

    def output_layer(self):
        """The last linear layer, whose kernel columns are the class embeddings (default: ``logits``)."""
        network = getattr(self, "network", None)
        try:
            return None if network is None else network.get_layer("logits")
        except ValueError:
            return None

    def context_graph(self):
        """``(graph [C, C], labels [C])`` of a method that learns a graph over its memory, else None."""
        return None

    def export_artifacts(self, benchmark, split: str = "test", num_images: int = 1000) -> dict:
        """Arrays for the figures: penultimate embeddings of a fixed subset of ``num_images``
        evaluation images spread evenly over all tasks (their first ones in split order), their
        labels and tasks, the class embeddings, and the context graph with its memory labels."""
        import numpy as np

        from gcl_tf.data.streams import to_float

        out = {}
        tasks = benchmark.tasks
        per_task = -(-num_images // len(tasks))
        images, labels, task_ids = [], [], []
        for task in tasks:
            data = task.eval_data(split)
            images.append(data.images[:per_task])
            labels.append(data.labels[:per_task])
            task_ids.append(np.full(len(labels[-1]), task.index))
        images = np.concatenate(images)[:num_images]
        chunk = max(1, int(self.config.eval.batch_size))
        features = [self.penultimate(to_float(images[i:i + chunk])) for i in range(0, len(images), chunk)]
        if features and features[0] is not None:
            out["embeddings"] = np.concatenate([np.asarray(f, np.float32) for f in features])
            out["embedding_labels"] = np.concatenate(labels)[:num_images].astype(np.int64)
            out["embedding_tasks"] = np.concatenate(task_ids)[:num_images].astype(np.int64)
            layer = self.output_layer()
            if layer is not None:
                out["class_embeddings"] = np.asarray(layer.kernel, np.float32).T  # [K, D]
        graph = self.context_graph()
        if graph is not None:
            out["context_graph"], out["memory_labels"] = (np.asarray(graph[0], np.float32),
                                                          np.asarray(graph[1], np.int64))
        return out
