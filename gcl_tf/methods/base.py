"""The base class of every method: a ``keras.Model`` whose ``train_step`` is the whole online update.

A method implements
- ``learn(x, y) -> dict``: one online update on a minibatch (inside the compiled step); returns
  the scalar loss terms to log;
- ``predict_log_probs(x, class_mask) -> [N, K]``: class log-probabilities restricted to the
  classes allowed by ``class_mask`` ([N, K] or [K] bool);
and, when it needs task boundaries (``task_free = False``), ``on_task_begin`` / ``on_task_end``.
``fit``, ``evaluate``, ``predict``, callbacks and TensorBoard work as in any Keras model: each
``fit`` call is one task (a :class:`gcl_tf.callbacks.TaskBoundary` callback calls the task hooks;
``fit`` adds one when none is given). Evaluation runs inside ``with model.evaluation_scope():``, a
span in which the model's state does not change, so that a method may compute what depends only
on that state once for all test batches (``on_evaluation_begin`` / ``on_evaluation_end``).

Constructors take the method's own keys, the fields of the class's ``Config`` (a dataclass
declared once, without TensorFlow: gcl_tf/methods/configs.py), either as keywords or as one
``settings=Config(...)`` (which a type checker sees); a subclass's ``__init__`` passes them on in
``**keys``; they are checked here, before the subclass's ``__init__`` goes on, and kept as
``self.settings``, where the method reads them. The common keywords, listed or passed on in ``**keys``:
``backbone`` (a ``keras.Model`` from images ``[N, H, W, C]`` to features ``[N, D]``; None: a
two-layer MLP of 256 units), ``num_classes``, ``input_shape`` (an image's shape; None: the
backbone's declared input), ``seed`` (the method's randomness: memory sampling, graph noise),
``batch_size`` (the training batch; None: the first batch's size; ``fit`` cuts a stream into
batches of it, a last partial batch dropped, so that the compiled step keeps one shape),
``eval_batch_size`` (sizes a method's evaluation buffers; None: the first test batch's size),
``augment`` (an in-step augmentation set of :mod:`gcl_tf.augment`, ``"none"``, ``"ocl"``, ``"crop_flip"`` or
``"pad_crop_flip"``: the method applies it to the images it trains on, incoming and replayed, inside the compiled step;
its memory keeps the raw images; only a method whose ``Config`` says ``augments_in_step`` takes one),
``name`` (None: the method's registry key).

What the library reads from a method class (docs/api.md, "Adding a method"), with defaults for a
method that declares nothing: ``task_free``, ``supports_distribution``, ``tune_grid`` (the
tuner's default space), ``memory_slots`` and ``memory_fields`` (the episodic memory, for the
memory estimate); :class:`~gcl_tf.methods.hooks.Hooks`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
from typing import ClassVar, Optional

import keras
import tensorflow as tf

from gcl_tf import methods, salts
from gcl_tf.data.streams import to_float
from gcl_tf.distribute import apply_if
from gcl_tf.errors import ConfigError
from gcl_tf.memory import state_variable
from gcl_tf.memory.state import step_seed
from gcl_tf.methods.hooks import Hooks
from gcl_tf.optimizers import averages_in_place, averaging_optimizer, keeping_learned_weights, make_optimizer
from gcl_tf.precision import float32, wrap_optimizer
from gcl_tf.saving import LearnerSaving
from gcl_tf.schema import MethodConfig, build_dataclass, did_you_mean

NEG_INF = -1e9


def infer_input_shape(input_shape, backbone, method: str) -> tuple:
    """An image's shape: ``input_shape``, else the input the backbone declares (the two must agree)."""
    declared = None
    if backbone is not None:
        try:
            declared = tuple(backbone.input_shape)[1:]
        except (AttributeError, ValueError, TypeError):
            declared = None
        if declared is not None and any(d is None for d in declared):
            declared = None
    if input_shape is not None and declared is not None and tuple(int(d) for d in input_shape) != declared:
        raise ConfigError(f"input_shape: {tuple(input_shape)} differs from the input {declared} that {method}'s "
                          f"backbone declares; allowed: {declared}, or leave input_shape out")
    input_shape = declared if input_shape is None else input_shape
    if input_shape is None:
        raise ConfigError(f"input_shape: {method} needs the shape of an image (its backbone declares none); "
                          "allowed: a tuple such as input_shape=(28, 28, 1)")
    return tuple(int(d) for d in input_shape)


def mask_logits(logits, class_mask):
    """Logits of classes outside ``class_mask`` set to a large negative value."""
    class_mask = tf.broadcast_to(tf.cast(class_mask, tf.bool), tf.shape(logits))
    return tf.where(class_mask, logits, tf.cast(NEG_INF, logits.dtype))


def present_classes(labels, num_classes: int):
    """[K] bool: the classes among ``labels`` (ER-ACE's and GCL's ``target_loss: present`` mask)."""
    return tf.reduce_max(tf.one_hot(labels, num_classes), axis=0) > 0


def cross_entropy(labels, logits):
    """Per-sample softmax cross-entropy [N], in float32 (logits of a mixed-precision layer are cast)."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(labels, tf.int32), logits=float32(logits))


def _for_keras_reduction(logs: dict) -> dict:
    """Under MultiWorkerMirroredStrategy Keras averages step outputs across workers *along axis 0*,
    which fails on scalars: give each log a leading axis of 1 there (the average is a scalar)."""
    if isinstance(tf.distribute.get_strategy(), tf.distribute.MultiWorkerMirroredStrategy):
        return {name: tf.reshape(value, [1]) for name, value in logs.items()}
    return logs


class ContinualModel(Hooks, LearnerSaving, keras.Model):
    """Base class; see the module docstring. ``model.save("learner.keras")`` saves it whole (its
    memory too) and :func:`gcl_tf.load_model` loads it, ready to go on learning (gcl_tf/saving.py).
    What the library reads from a method, with defaults: :class:`~gcl_tf.methods.hooks.Hooks`."""

    #: The method's keys (a subclass names its own; a class derived from a method keeps its parent's).
    Config: ClassVar[type[MethodConfig]] = MethodConfig
    #: The keys it was built with, checked (types, ranges, the rules between keys): where it reads them.
    settings: MethodConfig

    def __init__(self, backbone=None, *, num_classes: int, input_shape=None, seed: int = 0,
                 batch_size: Optional[int] = None, eval_batch_size: Optional[int] = None, augment: str = "none",
                 name: Optional[str] = None, settings: Optional[MethodConfig] = None, **keys):
        # The method itself computes in float32 whatever train.mixed_precision gives its layers
        # (gcl_tf/precision.py): no autocast of its own weights, float32 around the layers.
        name = name or methods.registry_name(type(self)) or type(self).__name__.lower()
        super().__init__(name=name, dtype="float32")
        self.settings = self.checked_settings(settings, keys)
        self.remember_construction(backbone)
        self.image_shape = infer_input_shape(input_shape, backbone, self.name)
        self.num_classes = int(num_classes)
        self.seed = int(seed)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.eval_batch_size = None if eval_batch_size is None else int(eval_batch_size)
        self.augment = self.check_augment(augment)
        self._evaluation_depth = 0
        # Counts training steps; keys the stateless randomness of every step.
        self.step_counter = state_variable(tf.constant(0, tf.int64), "step_counter")
        self.current_task = state_variable(tf.constant(0, tf.int32), "current_task")
        # One more than the last task begun: the index of the next task (fit's own task boundaries,
        # a run that starts from a saved learner).
        self.next_task = state_variable(tf.constant(0, tf.int32), "next_task")
        # The first step (1-based) whose loss terms or updated weights were NaN or infinite; 0 while
        # every step was finite. Set inside the compiled step; the driver reads it only when it saves
        # a checkpoint (no per-step host sync) and stops a diverged run.
        self.first_nonfinite_step = state_variable(tf.constant(0, tf.int64), "first_nonfinite_step")
        self.accuracy_tracker = keras.metrics.Mean(name="accuracy")
        self.eval_loss_tracker = keras.metrics.Mean(name="loss")

    def checked_settings(self, settings: Optional[MethodConfig], keys: dict) -> MethodConfig:
        """The class's ``Config`` from ``settings`` (one, as a type checker sees it) or from the
        keywords ``keys``: a TypeError for a keyword that is no key (as Python says it), a
        ConfigError naming ``Class.key`` for a wrong type, a value out of range or a broken rule."""
        cls, config = type(self), self.Config
        names = [f.name for f in dataclasses.fields(config) if f.name != "name"]
        for key in keys:
            if key not in names:  # with a did-you-mean (issue 71): GCL(graph_lamda=5)
                hint = did_you_mean(key, names + list(inspect.signature(cls.__init__).parameters))
                raise TypeError(f"{cls.__name__}.__init__() got an unexpected keyword argument {key!r}"
                                + (f"; {hint.strip()}" if hint else ""))
        if settings is not None:
            if keys or not isinstance(settings, config):
                raise TypeError(f"{cls.__name__}.__init__(): settings must be a {config.__qualname__}, given alone "
                                f"(not with keys as keywords)")
            keys = {key: getattr(settings, key) for key in names}
        registered = methods.registry_name(cls)  # the method's settings name it, its Config its own or its parent's
        built = build_dataclass(config, {**keys, **({"name": registered} if registered else {})}, cls.__name__)
        built.check_settings(cls.__name__)
        return built

    def check_augment(self, augment: str) -> str:
        """``augment`` if this method takes it (see the module docstring) and its keys allow it
        (``Config.check_augmentation``), else a ConfigError."""
        from gcl_tf.augment import IN_STEP

        if augment not in IN_STEP:
            raise ConfigError(f"augment: {augment!r} is not an in-step augmentation; allowed: {', '.join(IN_STEP)}")
        if augment != "none" and not self.settings.augments_in_step:
            raise ConfigError(f"augment: {self.name} does not augment inside its step; allowed: none (in-step "
                              f"augmentation is for {', '.join(methods.augmenting_names())})")
        self.settings.check_augmentation(augment)
        return augment

    def augmented(self, images, salt: int = salts.AUGMENT):
        """``images`` under the model's ``augment`` set, drawn from the run's seed, the step and
        ``salt`` (a second view of the same images takes another salt); as given for ``none``."""
        if self.augment == "none":
            return images
        from gcl_tf.augment import augment

        return augment(images, self.augment, step_seed(self.seed, self.step_counter, salt))

    def default_backbone(self, backbone):
        """``backbone``, or the default MLP (two ReLU layers of 256 units) on the input shape."""
        if backbone is not None:
            return backbone
        from gcl_tf.backbones import mlp

        return mlp(self.image_shape, 256)

    # ------------------------------------------------------------------ to implement
    def learn(self, x, y) -> dict:
        raise NotImplementedError

    def predict_log_probs(self, x, class_mask):
        """Default: log-softmax of the masked logits of ``self(x)``."""
        logits = float32(self(x, training=False))
        return tf.nn.log_softmax(mask_logits(logits, class_mask), axis=-1)

    @contextlib.contextmanager
    def evaluation_scope(self):
        """A span of predictions during which the model's weights and memory do not change (no
        training step, no restore in between): a method may then compute what depends only on
        them once, at the first test batch, and reuse it (GCL: the memory's embeddings). Outside
        a scope every prediction computes everything afresh. Scopes nest: only the outermost
        one calls the hooks. With an optimizer that averages the weights (``train.ema_momentum``)
        the scope predicts with the averages and gives the learned weights back at its end."""
        with contextlib.ExitStack() as undo:  # undone in reverse, whatever raises
            self._evaluation_depth += 1
            undo.callback(setattr, self, "_evaluation_depth", self._evaluation_depth - 1)
            if self._evaluation_depth == 1:
                undo.enter_context(averages_in_place(averaging_optimizer(getattr(self, "optimizer", None))))
                undo.enter_context(self.test_statistics())
                self.on_evaluation_begin()
                undo.callback(self.on_evaluation_end)
            yield self

    @contextlib.contextmanager
    def evaluation_variant(self, changes: dict):
        """Predictions with the model's settings changed by ``changes`` (one of
        :meth:`evaluation_variants`, ``{key: value}``; prediction-time keys only: training is
        unchanged). The compiled test and predict functions are rebuilt on entry and again on exit."""
        saved = self.settings
        try:
            self.settings = dataclasses.replace(saved, **changes)
            self.test_function = self.predict_function = None
            yield self
        finally:
            self.settings = saved
            self.test_function = self.predict_function = None

    # ------------------------------------------------------------------ Keras entry points
    def fit(self, x=None, y=None, batch_size=None, callbacks=None, shuffle=False, **kwargs):
        """``keras.Model.fit`` on one task's stream, in stream order.

        ``x``: a ``tf.data.Dataset`` of ``(images, labels)`` batches (uint8 or float images), or
        arrays ``x, y``. The stream is cut into batches of ``batch_size`` (default: the model's,
        else the first batch's size), a last partial batch dropped: the compiled step keeps one
        shape. Each call is one task: unless ``callbacks`` hold a
        :class:`gcl_tf.callbacks.TaskBoundary`, one is added for the next task (index: one more
        than the last task begun) whose classes, where the method needs them, are read from
        the stream.
        """
        from gcl_tf.callbacks import TaskBoundary

        x = self.training_stream(x, y, batch_size)
        callbacks = list(callbacks or [])
        if not any(isinstance(c, TaskBoundary) for c in callbacks):
            callbacks.insert(0, TaskBoundary(int(self.next_task.numpy()), x))
        with keeping_learned_weights(averaging_optimizer(self.optimizer)):  # the next task learns on from them
            return super().fit(x, callbacks=callbacks, shuffle=shuffle, **kwargs)

    def training_stream(self, x, y=None, batch_size=None):
        """``x`` (and ``y``) as a dataset of batches of one static size (see :meth:`fit`)."""
        if not isinstance(x, tf.data.Dataset):
            if y is None:  # a distributed dataset, a generator: as Keras takes it
                return x
            size = batch_size or self.batch_size or 32
            return tf.data.Dataset.from_tensor_slices((x, y)).batch(size, drop_remainder=True)
        size = batch_size or self.batch_size
        spec = x.element_spec
        static = spec[0].shape[0] if isinstance(spec, tuple) else None
        if size is None and static is None:
            size = int(next(iter(x))[0].shape[0])
        if size is None or static == size:
            return x
        stream = x.rebatch(size, drop_remainder=True)
        if x.cardinality() >= 0:  # a finite stream: count its batches, so that Keras knows the epoch's end
            samples = x.map(lambda *batch: tf.shape(batch[1], out_type=tf.int64)[0]).reduce(
                tf.constant(0, tf.int64), lambda total, n: total + n)
            stream = stream.apply(tf.data.experimental.assert_cardinality(int(samples) // size))
        return stream

    def evaluate(self, x=None, y=None, *args, **kwargs):
        """``keras.Model.evaluate`` inside an :meth:`evaluation_scope`. Batches are ``(images,
        labels)`` or ``(images, labels, class_mask, weight)``; ``accuracy`` is the metric."""
        self.prepare_evaluation(x)
        with self.evaluation_scope():
            return super().evaluate(x, y, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        """``keras.Model.predict`` inside an :meth:`evaluation_scope`: class probabilities [N, K]."""
        with self.evaluation_scope():
            return super().predict(x, *args, **kwargs)

    def prepare_evaluation(self, x) -> None:
        """Before an evaluation of ``x``: set ``eval_batch_size`` from its first batch if unset."""
        if self.eval_batch_size is None and isinstance(x, tf.data.Dataset):
            self.eval_batch_size = int(next(iter(x))[0].shape[0])

    # ------------------------------------------------------------------ Keras plumbing
    @property
    def metrics(self):
        return [self.accuracy_tracker, self.eval_loss_tracker]

    def compile(self, optimizer="rmsprop", *, jit_compile=False, **kwargs):
        """``keras.Model.compile`` (the method computes its own losses: no ``loss``), then build
        the optimizer's slots, so that the training step traces once. ``jit_compile`` defaults to
        False (XLA measured slower on CPU for these steps)."""
        super().compile(optimizer=optimizer, jit_compile=jit_compile, **kwargs)
        self.optimizer.build(self.trainable_variables)
        self.built = True  # every variable exists (Keras's symbolic build is skipped)

    def compile_for_training(self, train_config) -> None:
        """Compile with the configured optimizer (in a LossScaleOptimizer under mixed_float16; the
        config's ``train`` section); ``jit_compile: auto`` is decided here, for the device and
        strategy the model is built under (gcl_tf/devices.py)."""
        from gcl_tf.devices import resolve_jit_compile

        self.compile(
            optimizer=wrap_optimizer(make_optimizer(train_config), train_config.mixed_precision),
            jit_compile=resolve_jit_compile(train_config.jit_compile, deterministic=train_config.deterministic or None),
            steps_per_execution=train_config.steps_per_execution,
        )

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Skip Keras's symbolic build: every variable of a method exists after construction and
        ``compile_for_training``. Under a strategy Keras would average a first input batch over
        the replicas to build with it, a collective that fails in eager mode under
        MultiWorkerMirroredStrategy."""

    def _static_batch(self, tensors, global_batch: Optional[int]):
        """Give the batch dimension its static size where a distributed input lost it (each
        replica gets ``global_batch / R`` samples): fixed shapes keep the step from retracing."""
        from gcl_tf.distribute import num_replicas

        found = tuple(tensors[0].shape[1:]) if tensors[0].shape.rank else ()
        if len(found) != len(self.image_shape) or any(f not in (None, d) for f, d in zip(found, self.image_shape)):
            shown = "x".join("?" if d is None else str(d) for d in found) or "scalars"
            raise ConfigError(f"input_shape: the stream's images are {shown} but {self.name} takes "
                              f"{'x'.join(map(str, self.image_shape))} (its input_shape or its backbone's input); "
                              "allowed: a model built for the stream's images (stream.input_shape)")
        if tensors[0].shape[0] is not None or global_batch is None or not tf.distribute.has_strategy():
            return tensors
        local = global_batch // num_replicas()
        return [tf.ensure_shape(t, [local] + t.shape[1:].as_list()) for t in tensors]

    def train_step(self, data):
        x, y = self._static_batch(list(data[:2]), self.batch_size)
        logs = self.learn(to_float(x), tf.reshape(tf.cast(y, tf.int32), [-1]))
        # After the step's data arrived: a call past a stream's end (Keras's end of an epoch of
        # unknown length) fails at the input and must not count a step.
        with tf.control_dependencies(list(logs.values())):
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
        data = self._static_batch(list(data), self.eval_batch_size)
        if len(data) == 2:  # (images, labels): every class allowed, every sample counted
            data += [tf.ones([self.num_classes], tf.bool), tf.ones(tf.shape(data[0])[:1])]
        x, y, class_mask, weight = data
        log_probs = self.predict_log_probs(to_float(x), class_mask)  # [N, K]
        y = tf.reshape(tf.cast(y, tf.int32), [-1])
        correct = tf.cast(tf.equal(tf.argmax(log_probs, axis=-1, output_type=tf.int32), y), tf.float32)
        nll = -tf.gather(log_probs, y, axis=1, batch_dims=1)
        self.accuracy_tracker.update_state(correct, sample_weight=weight)
        self.eval_loss_tracker.update_state(nll, sample_weight=weight)
        return _for_keras_reduction({"accuracy": self.accuracy_tracker.result(),
                                     "loss": self.eval_loss_tracker.result()})

    def predict_step(self, data):
        x = to_float(data[0] if isinstance(data, (tuple, list)) else data)
        mask = tf.ones([self.num_classes], tf.bool)
        return tf.exp(self.predict_log_probs(x, mask))

    def apply_gradients(self, tape, loss, variables=None, when=None):
        """Gradients of ``loss`` applied by the optimizer. Under a ``LossScaleOptimizer``
        (mixed_float16) the loss is scaled (the tape's output gradient is the loss scale) and the
        optimizer unscales them and skips a step whose gradients overflowed; returns them as the
        tape gave them. ``when`` (a scalar bool tensor): applied only when it holds, else no
        optimizer update at all (no step counted, no moment changed; the gradients are taken
        outside the condition)."""
        variables = self.trainable_variables if variables is None else variables
        scale = None
        if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
            scale = tf.cast(self.optimizer.scale_loss(tf.ones_like(loss, tf.float32)), loss.dtype)
        grads = tape.gradient(loss, variables, output_gradients=scale)
        if when is None:
            self.optimizer.apply(grads, variables)
        else:
            apply_if(when, self.optimizer.apply, grads, variables)
        return grads
