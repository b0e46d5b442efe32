"""A learner saved whole: ``model.save("learner.keras")``, ``gcl_tf.load_model("learner.keras")``.

Every method is a Keras model whose ``.keras`` file (Keras's own format, a zip) holds all it needs
to go on learning:

- ``config.json``: the method's class and constructor keywords (:meth:`LearnerSaving.get_config`:
  its own keys, the classes, the image shape, the seed, the batch sizes, the backbone's Keras
  config and the Keras dtype policy its layers were built under) and the compile config (the
  optimizer and its settings);
- ``model.weights.h5``: every layer's weights and the optimizer's variables (its step count and
  slots), as Keras writes them, and, in the model's own entry, the method's state: every
  ``tf.Variable`` reachable from the model that is not a Keras variable, under its path in
  TensorFlow's object graph (the names a ``tf.train.Checkpoint`` uses): the episodic memory
  (images, labels, counters), GCL's best context losses and stored edges, EWC's Fisher and
  anchors, iCaRL's exemplars and class means, task class masks, the step counter.

Randomness needs nothing more: every random draw is stateless, keyed on the seed (config) and the
counters (state). A loaded learner predicts exactly as the saved one and its next steps are
those the saved one would have taken. Evaluation caches are plain objects, not state: not saved.

``keras.models.load_model`` finds a method's class once its module is imported (each class is
registered with Keras as ``gcl_tf>Name`` when defined); ``gcl_tf.load_model`` (gcl_tf/api.py)
imports them all first.
"""
from __future__ import annotations

import dataclasses
import types

import keras
import numpy as np
import tensorflow as tf

# Key prefix of the method state in the model's own weights entry (Keras's own are "0", "1", ...).
STATE_PREFIX = "state:"


def method_state(model) -> dict:
    """``{path: tf.Variable}``: the method state of ``model`` (see the module docstring), in a
    fixed order (breadth first over TensorFlow's object graph, children by name)."""
    found, seen = {}, {id(model)}
    queue = [((), model)]
    while queue:
        path, obj = queue.pop(0)
        for name, child in tf.train.TrackableView.children(obj).items():
            if id(child) in seen or isinstance(child, (keras.Variable, keras.optimizers.Optimizer)):
                continue  # Keras saves its own variables and the optimizer's
            seen.add(id(child))
            if isinstance(child, tf.Variable):
                found[".".join(path + (name,))] = child
            else:
                queue.append((path + (name,), child))
    return found


def save_state(model, store) -> None:
    """Write the method state of ``model`` into a Keras weights ``store`` (the model's entry)."""
    for path, variable in method_state(model).items():
        store[STATE_PREFIX + path] = np.asarray(variable.numpy())


def load_state(model, store) -> None:
    """Assign the method state saved in ``store``; a ValueError naming what does not fit."""
    state = method_state(model)
    saved = {key[len(STATE_PREFIX):] for key in store.keys() if key.startswith(STATE_PREFIX)}
    missing, unexpected = sorted(set(state) - saved), sorted(saved - set(state))
    if missing or unexpected:
        raise ValueError(f"the saved state does not fit this {type(model).__name__}: "
                         f"missing {missing[:3]}, unexpected {unexpected[:3]}")
    for path, variable in state.items():
        value = np.asarray(store[STATE_PREFIX + path])
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(f"the saved {path} has shape {value.shape}, this {type(model).__name__} "
                             f"holds {tuple(variable.shape)}")
        variable.assign(value.astype(variable.dtype.as_numpy_dtype))


class LearnerSaving:
    """Mixin of :class:`gcl_tf.methods.base.ContinualModel`: the Keras saving protocol for a
    method (constructor keywords as its config, the method state with its weights)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        keras.saving.register_keras_serializable(package=cls.__module__.split(".")[0], name=cls.__name__)(cls)

    def remember_construction(self, backbone) -> None:
        """Keep what :meth:`get_config` needs besides the model's attributes: the backbone as given
        (None: the method's default) and the Keras dtype policy its layers are built under. In a
        read-only mapping written past Keras's attribute tracking: Keras saves the backbone's
        weights where the method holds it, not here."""
        vars(self)["_construction"] = types.MappingProxyType(
            {"backbone": backbone, "dtype_policy": keras.config.dtype_policy().name})

    def get_config(self) -> dict:
        """The constructor's keywords, as the learner is now: its settings (the keys of its
        ``Config``), the common keywords (a batch size set by the first batch included), the
        backbone as its Keras config and the dtype policy of its layers. A method whose
        constructor names more (``num_tasks``, ...) adds them (``super().get_config()``)."""
        settings = {f.name: getattr(self.settings, f.name) for f in dataclasses.fields(self.settings)
                    if f.name != "name"}
        backbone = self._construction["backbone"]
        return {**settings, "backbone": None if backbone is None else keras.saving.serialize_keras_object(backbone),
                "num_classes": self.num_classes, "input_shape": list(self.image_shape), "seed": self.seed,
                "batch_size": self.batch_size, "eval_batch_size": self.eval_batch_size, "augment": self.augment,
                "name": self.name, "dtype_policy": self._construction["dtype_policy"]}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        from gcl_tf.precision import policy_scope

        config = dict(config)
        # A learner saved before a key's default changed lacks the key: it ran with the former
        # default (its Config's ``former_defaults``).
        for key, value in cls.Config.former_defaults.items():
            config.setdefault(key, value)
        policy = config.pop("dtype_policy", "float32")
        if isinstance(config.get("backbone"), dict):
            config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"],
                                                                       custom_objects=custom_objects)
        if config.get("input_shape") is not None:
            config["input_shape"] = tuple(config["input_shape"])
        with policy_scope(policy):
            return cls(**config)

    def compile_from_config(self, config) -> None:
        """Compile as the saved learner was (its optimizer, whose variables load next)."""
        self.compile(**keras.saving.deserialize_keras_object(config))

    def save_own_variables(self, store) -> None:
        super().save_own_variables(store)
        save_state(self, store)

    def load_own_variables(self, store) -> None:
        own = {key: store[key] for key in store.keys() if not key.startswith(STATE_PREFIX)}
        super().load_own_variables(own)
        load_state(self, store)

