"""The validation under every config: typed dataclasses checked key by key, with one-line errors.

A config section is a dataclass; :func:`build_dataclass` builds one from a mapping, checking
each key against the field's type annotation (``Literal``, ``Optional``, numbers, lists,
mappings) and its range (``field(metadata=value_range(lo, hi))``), and raising a
:class:`~gcl_tf.errors.ConfigError` that names the key and what is allowed. The methods declare
their keys here too (:class:`MethodConfig`), so that the run's config (:mod:`gcl_tf.config`) and
the methods (:mod:`gcl_tf.methods`) both build on this module and neither imports the other's
internals.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import inspect
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from gcl_tf.errors import ConfigError


def value_range(lo=None, hi=None, lo_open=False, hi_open=False):
    """Field metadata for a numeric range check."""
    return {"range": (lo, hi, lo_open, hi_open)}



@dataclass
class MethodConfig:
    """Base of every method's config; each method file subclasses it with its own keys
    (gcl_tf/methods/configs.py), and may override the two rule hooks."""

    # The method's registry key (each method's Config defaults to its own; a method without keys of its
    # own shares its parent's Config, and its settings carry its own key: ContinualModel.checked_settings).
    name: str = ""
    # Keys whose default changed, with the value they had before: a config or learner saved
    # before the change, which lacks the key, ran with that value, and reads back so.
    former_defaults: ClassVar[dict] = {}
    # False for a method whose gradients do not go through ContinualModel.apply_gradients (it
    # applies its own or moves the weights itself): no loss scaling, refused under mixed_float16.
    supports_loss_scaling: ClassVar[bool] = True
    # True for a method whose step applies benchmark.augment's in-step set to every image it trains
    # on (:meth:`gcl_tf.methods.base.ContinualModel.augmented`); the others refuse one but none.
    augments_in_step: ClassVar[bool] = False

    def check_settings(self, section: str = "method") -> None:
        """The rules between the method's own keys (``section``: how errors name them): a
        ConfigError naming the key. Default: none."""

    def check_augmentation(self, augment: str, section: str = "method") -> None:
        """The rules between the method's keys and the run's in-step augmentation (``augment``:
        benchmark.augment, or the model's ``augment`` keyword): a ConfigError naming the key.
        Default: none."""

    def check(self, config) -> None:
        """The rules between the method's keys and the rest of a run's ``config`` (its other
        sections). Default: :meth:`check_settings` and :meth:`check_augmentation`."""
        self.check_settings()
        self.check_augmentation(config.benchmark.augment)


@dataclass
class MemoryMethodConfig(MethodConfig):
    """Base of the config of every method with an episodic memory."""

    # Samples the episodic memory holds, over all tasks (GEM, A-GEM: split evenly across tasks;
    # iCaRL: across its exemplar sets).
    memory_size: int = field(default=1000, metadata=value_range(1))

    def __init_subclass__(cls, **kwargs):
        """A method's config inherits ``memory_size`` and does not declare it again (one range,
        one default, one meaning for every method): a TypeError when it does."""
        super().__init_subclass__(**kwargs)
        own = (inspect.get_annotations(cls) if hasattr(inspect, "get_annotations")  # Python >= 3.10
               else cls.__dict__.get("__annotations__", {}))
        if "memory_size" in own:
            raise TypeError(f"{cls.__module__}.{cls.__qualname__}: memory_size is declared once, in "
                            "MemoryMethodConfig; allowed: inherit it")



def type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(type_name(a) for a in args) + " or null"
    if origin in (list, tuple):
        return "a list"
    if origin is dict or tp is dict:
        return "a mapping"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def describe_value(value) -> str:
    return "null" if value is None else repr(value)


def coerce(value, tp, key: str):
    """Check ``value`` against the annotation ``tp``; return the (possibly converted) value."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, key)
            except ConfigError as error:
                errors.append(error)
        if float in args and isinstance(value, float) and not math.isfinite(value):
            raise errors[[a for a in args if a is not type(None)].index(float)]  # "not a finite number"
        raise ConfigError(f"{key}: expected {type_name(tp)}, got {describe_value(value)}")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed or isinstance(value, bool) != any(isinstance(a, bool) for a in allowed):
            raise ConfigError(
                f"{key}: {describe_value(value)} is not allowed; allowed: {', '.join(str(a) for a in allowed)}"
            )
        return value
    if origin in (list, tuple):
        (item_tp,) = typing.get_args(tp)[:1] or (Any,)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {describe_value(value)}")
        return [coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {describe_value(value)}")
        return copy.deepcopy(value)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None and math.isfinite(float(number)):
            return float(number)
        if number is not None:  # a number, but .inf or .nan: no setting takes one
            raise ConfigError(f"{key}: {describe_value(value)} is not a finite number; allowed: a finite number")
    elif tp is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"{key}: expected {type_name(tp)}, got {describe_value(value)}")


def check_range(value, spec, key):
    if value is None or isinstance(value, str):  # a named choice of a number-or-name key ("median")
        return
    lo, hi, lo_open, hi_open = spec
    ok = True
    if lo is not None:
        ok &= value > lo if lo_open else value >= lo
    if hi is not None:
        ok &= value < hi if hi_open else value <= hi
    if not ok:
        left = "(" if lo_open else "["
        right = ")" if hi_open or hi is None else "]"  # an unbounded end is open: no setting takes inf
        left = "(" if lo is None else left
        lo_s = "-inf" if lo is None else (f"{lo:g}" if isinstance(lo, float) else str(lo))
        hi_s = "inf" if hi is None else (f"{hi:g}" if isinstance(hi, float) else str(hi))
        raise ConfigError(f"{key}: {value!r} is out of range; allowed: {left}{lo_s}, {hi_s}{right}")


def did_you_mean(word, choices, prefix: str = "") -> str:
    """``"did you mean 'train.learning_rate'? "`` for a near miss of one of ``choices`` (under the
    dotted ``prefix``), else ""."""
    folded = {str(c).lower(): str(c) for c in choices}  # GCL -> gcl: a near miss whatever the case
    close = difflib.get_close_matches(str(word).lower(), list(folded), n=1, cutoff=0.75)
    return f"did you mean '{prefix + '.' if prefix else ''}{folded[close[0]]}'? " if close else ""


def build_dataclass(cls, data, prefix: str):
    """Build dataclass ``cls`` from the mapping ``data``, validating every key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix}: expected a mapping of keys, got {describe_value(data)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            where = f"{prefix}.{key}" if prefix else str(key)
            raise ConfigError(f"unknown key '{where}'; {did_you_mean(key, names, prefix)}allowed: {', '.join(names)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            kwargs[f.name] = build_dataclass(tp, data[f.name], key)
            continue
        value = coerce(data[f.name], tp, key)
        if "range" in f.metadata:
            check_range(value, f.metadata["range"], key)
        kwargs[f.name] = value
    return cls(**kwargs)
