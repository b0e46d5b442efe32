"""What the library reads from a method class, each with the default for a class that says
nothing: :class:`Hooks`, a base of :class:`~gcl_tf.methods.base.ContinualModel` (docs/api.md,
"Adding a method", has the table). The layers outside ``gcl_tf/methods`` (the driver, the
checkpoints, the memory estimate, the figures' arrays) call these and know no method by name.
"""
from __future__ import annotations

import contextlib
import math
from typing import Optional

FLOAT32 = 4  # bytes: the memories keep images as float32


class Hooks:
    """The attributes and hooks a method may declare or override (a mixin: the variables it
    touches, ``current_task`` and ``next_task``, are :class:`ContinualModel`'s)."""

    #: False for methods that need task boundaries (the driver provides them).
    task_free = True
    #: True for methods whose step runs under a tf.distribute strategy (train.distribute): its
    #: step must compute on R replicas what it computes on one (docs/api.md, "Adding a method").
    supports_distribution = False
    #: The tuner's default space (``python -m gcl_tf.tune`` without ``tune.space``): dotted config
    #: keys and their values, on top of the optimizer and learning-rate grid (gcl_tf/tune/space.py);
    #: a key here replaces the common one.
    tune_grid: dict = {}
    #: The method's name in tables and figures (None: the class name); rows follow the registry.
    label: Optional[str] = None
    #: The method's (colour, marker) in every figure of every suite, matplotlib's (GCL: red with a
    #: star); None: one of its own besides those of the registered methods (gcl_tf/benchmark/styles.py).
    style: Optional[tuple] = None
    #: Small settings (method keys) for the library's own tests of every method: runs of a few
    #: steps on tiny streams (tests/test_reliability.py, tests/test_distribute.py).
    test_settings: dict = {}

    # ------------------------------------------------------------------ a run's checks and estimates
    @classmethod
    def check_replicas(cls, config, replicas: int) -> None:
        """Raise a ConfigError if the method's own batch sizes do not split over ``replicas``."""

    @classmethod
    def memory_slots(cls, config) -> int:
        """Samples the method's episodic memory holds under a run's config (0: no memory);
        default: ``method.memory_size``. Sizes the memory estimate (gcl_tf/resources.py)."""
        return int(getattr(config.method, "memory_size", 0) or 0)

    @classmethod
    def memory_fields(cls, num_classes: int) -> dict:
        """What the memory keeps of each sample besides its image and label: ``{name: (shape,
        dtype)}`` (DER++: its logits, ``{"logits": ((num_classes,), "float32")}``). A method
        builds its memory with it (``ReservoirMemory(..., extra=self.memory_fields(K))``) and the
        memory estimate counts it. Default: nothing."""
        return {}

    @classmethod
    def memory_estimate(cls, config, input_shape, num_classes: Optional[int] = None) -> list:
        """``[(what, bytes)]``: the run's largest buffers on one device, largest first (the memory
        check, gcl_tf/resources.py): the episodic memory's images (:meth:`memory_slots`), its
        per-sample fields (:meth:`memory_fields`, counted when ``num_classes``, which they may
        depend on, is given) and the method's other buffers (:meth:`memory_buffers`)."""
        import numpy as np

        slots = cls.memory_slots(config)
        if not slots:  # finetune, ewc: no episodic memory
            return []
        buffers = [(f"the memory's {slots} images", slots * math.prod(int(d) for d in input_shape) * FLOAT32)]
        for name, (shape, dtype) in (cls.memory_fields(int(num_classes)) if num_classes is not None else {}).items():
            size = math.prod(int(d) for d in shape) * int(np.dtype(getattr(dtype, "as_numpy_dtype", dtype)).itemsize)
            buffers.append((f"the memory's {slots} {name} [{', '.join(str(int(d)) for d in shape)}]", slots * size))
        return sorted(buffers + cls.memory_buffers(config), key=lambda item: -item[1])

    @classmethod
    def memory_buffers(cls, config) -> list:
        """Other large buffers the method keeps under a run's config, ``[(what, bytes)]`` for the
        memory estimate (gcl_tf/resources.py; GCL: its context graph and a step's graphs).
        Default: none."""
        return []

    @classmethod
    def memory_advice(cls, config) -> str:
        """What to change when the memory estimate exceeds the device (one clause of the error)."""
        return "lower method.memory_size"

    # ------------------------------------------------------------------ task boundaries, evaluation
    def on_task_begin(self, task_index: int, classes) -> None:
        """Called before a task's first step; ``classes`` are the labels of its samples."""
        self.current_task.assign(task_index)
        self.next_task.assign(int(task_index) + 1)

    def on_task_end(self, task_index: int, dataset) -> None:
        """Called after a task's last step, before it is evaluated. ``dataset`` is its stream."""

    def test_statistics(self):
        """A context in which the network normalises as the method predicts at test time (entered by
        :meth:`evaluation_scope` after the weights' averages, and by ``gcl_tf.export`` for what it saves);
        default: as it is (GCL's ``test_batchnorm: memory``: BatchNorm's statistics from the memory)."""
        return contextlib.nullcontext()

    def on_evaluation_begin(self) -> None:
        """Entering an evaluation span (see :meth:`evaluation_scope`); default: nothing."""

    def on_evaluation_end(self) -> None:
        """Leaving an evaluation span; default: nothing."""

    def evaluation_variants(self) -> dict:
        """Other prediction settings every task-end evaluation also measures, as ``{name:
        {key: value}}`` (keys of the method's ``Config``): the driver evaluates every task once
        more under each (see :meth:`evaluation_variant`) and writes each one's accuracy matrix into results.json's
        ``evaluations``, so that one training run gives every test-time variant. Default: none."""
        return {}

    # ------------------------------------------------------------------ the figures' arrays
    def penultimate(self, x):
        """Features ``[N, D]`` of images ``x`` that the last linear layer reads (gcl_tf/artifacts.py);
        default: the output of the backbone inside ``self.network``, None without one."""
        import keras

        network = getattr(self, "network", None)
        backbone = None if network is None else next(
            (layer for layer in network.layers if isinstance(layer, keras.Model)), None)
        return None if backbone is None else backbone(x, training=False)

    def output_layer(self):
        """The last linear layer (its kernel's columns: the class embeddings); default:
        ``self.network``'s layer ``logits``, None without one."""
        network = getattr(self, "network", None)
        try:
            return None if network is None else network.get_layer("logits")
        except ValueError:
            return None

    def context_graph(self) -> Optional[tuple]:
        """``(graph [C, C], labels [C])`` of a method that learns a graph over its memory (the
        figures, TensorBoard); default: None."""
        return None
