"""A method's own speed checks, one package per method that has them: ``gcl_tf.speed.<name>``,
``<name>`` its registry key (GCL's: :mod:`gcl_tf.speed.gcl`).

They time the method's own step against its reference (a plain PyTorch anchor, an analytic FLOP
count) with its own settings, so they name the method, its keys and the methods they compare it
to; ``python -m gcl_tf.benchmark throughput`` and ``gpu`` run those of the paper's method (the
``lead`` of gcl_tf/benchmark/paper_suite.yaml) through this room's two commands
(:mod:`gcl_tf.speed.throughput`, :mod:`gcl_tf.speed.gpu`), using gcl_tf/benchmark/, which keeps the generic
machinery (clocks, the matmul reference, FLOPs of Keras layers, the models and steps timed, the
devices, the placement analysis) and names no method.

A method's package holds (its ``__init__`` imports nothing heavy: this one reads it without
TensorFlow, and a mistake on a command line is answered before TensorFlow loads):

- ``SETTINGS``: the config sections the speed checks build the method with, ``{"method": {...},
  "train": {...}}`` (:func:`make_model` builds the method with them);
- a module per command, ``throughput`` and ``gpu``, each with ``main(argv=None) -> int``.

The packages live in a room of their own, above gcl_tf/benchmark/ (whose machinery they use) and
not in the method's package (``gcl_tf/methods/gcl/``, which must not import the benchmark:
tests/test_layout.py).
"""
from __future__ import annotations

import importlib
import importlib.util

from gcl_tf.methods import REGISTRY


def checks(name: str):
    """The speed checks of registered method ``name`` (its package here, imported), or None for
    a method without."""
    if name not in REGISTRY:
        raise KeyError(f"{name!r} is not a registered method; allowed: {', '.join(REGISTRY)}")
    package = f"{__name__}.{name}"
    return importlib.import_module(package) if importlib.util.find_spec(package) is not None else None


def settings(name: str) -> dict:
    """The config sections the speed checks build method ``name`` with: its package's
    ``SETTINGS``, ``{}`` for a method without speed checks."""
    package = checks(name)
    return {} if package is None else package.SETTINGS


def command(name: str, which: str):
    """The module of command ``which`` (``throughput``, ``gpu``) among the speed checks of method
    ``name``, imported; a UserError when the method has none."""
    from gcl_tf.errors import UserError

    package = checks(name)
    if package is None or importlib.util.find_spec(f"{package.__name__}.{which}") is None:
        raise UserError(f"{which}: method {name!r} has no speed checks ({__name__.replace('.', '/')}/{name}/"
                        f"{which}.py)")
    return importlib.import_module(f"{package.__name__}.{which}")


def lead_main(which: str, argv=None) -> int:
    """``main(argv)`` of the paper's method's (the ``lead`` of paper_suite.yaml) command ``which``,
    ``throughput`` or ``gpu``: what :mod:`.throughput` and :mod:`.gpu` run. Its package is imported
    without TensorFlow, so that ``--help`` and a mistake on the command line are answered in a
    fraction of a second."""
    from gcl_tf.benchmark import roles

    return command(roles.LEAD, which).main(argv)


def make_model(method: str, input_shape, **keywords):
    """:func:`gcl_tf.benchmark.workloads.make_model` with the settings of the method's speed checks."""
    from gcl_tf.benchmark import workloads  # (TensorFlow: deferred to a model)

    return workloads.make_model(method, input_shape, settings=settings(method), **keywords)
