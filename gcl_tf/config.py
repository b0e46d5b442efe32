"""Typed, validated experiment configuration: YAML file + ``--set dotted.key=value`` overrides.

A config file has the sections ``benchmark``, ``method``, ``model``, ``train``, ``eval`` and the
top-level keys ``seed`` and ``output_dir``. It may also hold ``presets``: per-method settings
(any of the sections above) applied on top of the rest of the file when ``method.name`` selects
that method. ``--set`` overrides apply last, so ``--set method.name=er`` picks the ER preset.

Every key is checked against the dataclasses below (and, for ``method``, against the chosen
method's own dataclass in ``gcl_tf/methods/<name>.py``). An unknown key, a wrong type or a
value outside its allowed set raises :class:`~gcl_tf.errors.ConfigError` with one line naming
the key and what is allowed.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

import yaml

from gcl_tf.errors import ConfigError


def _range(lo=None, hi=None, lo_open=False, hi_open=False):
    """Field metadata for a numeric range check."""
    return {"range": (lo, hi, lo_open, hi_open)}


@dataclass
class BenchmarkConfig:
    """Which data, which continual protocol."""

    name: Literal["permuted", "rotated", "split"] = "permuted"
    # Dataset name: a TFDS name for source=tfds (mnist, fashion_mnist, cifar10, cifar100,
    # svhn_cropped); a label for the other sources.
    dataset: str = "mnist"
    source: Literal["tfds", "idx", "npz", "folder", "digits"] = "tfds"
    # idx: folder with MNIST-format files; npz: a .npz file; folder: a root with train/ and test/;
    # tfds: optional TFDS data_dir.
    path: Optional[str] = None
    num_tasks: int = field(default=20, metadata=_range(1))
    # Training samples drawn per task (null: all the task's training samples).
    samples_per_task: Optional[int] = field(default=1000, metadata=_range(1))
    # Test samples per task (null: the task's whole test split).
    test_samples_per_task: Optional[int] = field(default=None, metadata=_range(1))
    classes_per_task: int = field(default=2, metadata=_range(1))
    # Number of classes (null: inferred from the source).
    num_classes: Optional[int] = field(default=None, metadata=_range(2))
    # Multi-head (task-aware test): predictions restricted to the task's classes.
    multi_head: bool = False
    # Fraction of each task's training samples held out as its validation split.
    validation_fraction: float = field(default=0.0, metadata=_range(0.0, 1.0, hi_open=True))
    # Rotated protocol: each task's angle is drawn uniformly from [0, max_rotation) degrees.
    max_rotation: float = field(default=180.0, metadata=_range(0.0, 360.0, lo_open=True))
    # Resize images to image_size x image_size (folder source; null keeps the native size).
    image_size: Optional[int] = field(default=None, metadata=_range(1))
    color_mode: Literal["rgb", "grayscale"] = "rgb"


@dataclass
class MethodConfig:
    """Base of every method's config; each method file subclasses it with its own keys."""

    name: str = "gcl"


@dataclass
class ModelConfig:
    backbone: Literal["mlp", "convnet", "resnet18"] = "mlp"
    # Width of the MLP's hidden layers (GCL: also the size of its embeddings).
    hidden_size: int = field(default=256, metadata=_range(1))
    # Convolution filters (null: the paper's, 64 for convnet and 20 for resnet18).
    filters: Optional[int] = field(default=None, metadata=_range(1))


@dataclass
class TrainConfig:
    batch_size: int = field(default=10, metadata=_range(1))
    epochs: int = field(default=1, metadata=_range(1))
    optimizer: Literal["sgd", "adam"] = "sgd"
    learning_rate: float = field(default=0.1, metadata=_range(0.0, lo_open=True))
    # Compile the training step with XLA: true, false, or auto (by device type: off on CPU, where
    # XLA was measured ~7x slower; on on a GPU; gcl_tf/devices.py, docs/gpu.md).
    jit_compile: Union[bool, Literal["auto"]] = "auto"
    # Keras dtype policy of the layers: float32, or mixed precision (float16 with loss scaling, or
    # bfloat16); losses and GCL's graph math stay float32 (gcl_tf/precision.py, docs/gpu.md).
    mixed_precision: Literal["float32", "mixed_float16", "mixed_bfloat16"] = "float32"
    # Training steps run per call of the compiled function (Keras steps_per_execution).
    steps_per_execution: int = field(default=1, metadata=_range(1))
    # Write per-step loss terms to TensorBoard every this many steps (0: never).
    log_every: int = field(default=10, metadata=_range(0))
    # tf.distribute strategy: none (one device), mirrored (the local devices, or train.devices),
    # multi_worker (MultiWorkerMirroredStrategy, workers from the TF_CONFIG environment variable).
    # The batch sizes are global: they must split evenly over the replicas.
    distribute: Literal["none", "mirrored", "multi_worker"] = "none"
    # Devices for distribute: mirrored, e.g. ["/cpu:0", "/cpu:1"] (null: all local GPUs, else the CPU).
    devices: Optional[list[str]] = None
    # Keras progress bar: 0 silent, 1 bar, 2 one line per task.
    verbose: int = field(default=1, metadata=_range(0, 2))
    # Save a checkpoint (DIR/checkpoints) every this many training steps, and always at the end of
    # every task; 0: only at task ends. `python -m gcl_tf.train ... --resume` continues from the last.
    checkpoint_every: int = field(default=500, metadata=_range(0))
    # Op determinism (tf.config.experimental.enable_op_determinism): a run is bit-identical for
    # its seed (the --deterministic option sets it).
    deterministic: bool = False


@dataclass
class EvalConfig:
    batch_size: int = field(default=500, metadata=_range(1))
    # Which split fills the accuracy matrix: test, or the validation split carved from each
    # task's training data (for tuning: the test split is then never read).
    split: Literal["test", "validation"] = "test"


@dataclass
class TuneConfig:
    """Hyper-parameter search (``python -m gcl_tf.tune``); ``gcl_tf.train`` ignores this section."""

    # Search space: {dotted.config.key: [values, ...]} (choices) or {dotted.config.key: {min, max,
    # log, step}} (a numeric range: random and bayesian tuners only). null: the GCL paper's
    # appendix grid for the chosen method (gcl_tf/tune.py PAPER_GRIDS).
    space: Optional[dict] = None
    tuner: Literal["grid", "random", "bayesian"] = "grid"
    # Trials at most (null: the whole grid; 10 for random and bayesian).
    max_trials: Optional[int] = field(default=None, metadata=_range(1))
    # Validation share of each task's training samples used when benchmark.validation_fraction
    # is 0 (a search always scores trials on validation splits, never on the test split).
    validation_fraction: float = field(default=0.1, metadata=_range(0.0, 1.0, lo_open=True, hi_open=True))


@dataclass
class Config:
    # Seeds NumPy, TensorFlow and Keras, which take 0 .. 2**32 - 1.
    seed: int = field(default=0, metadata=_range(0, 2**32 - 1))
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    output_dir: str = "runs/default"
    tune: TuneConfig = field(default_factory=TuneConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------- validation


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(_type_name(a) for a in args) + " or null"
    if origin in (list, tuple):
        return "a list"
    if origin is dict or tp is dict:
        return "a mapping"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _describe(value) -> str:
    return "null" if value is None else repr(value)


def _coerce(value, tp, key: str):
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
                return _coerce(value, arg, key)
            except ConfigError as error:
                errors.append(error)
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {_describe(value)}")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed or isinstance(value, bool) != any(isinstance(a, bool) for a in allowed):
            raise ConfigError(
                f"{key}: {_describe(value)} is not allowed; allowed: {', '.join(str(a) for a in allowed)}"
            )
        return value
    if origin in (list, tuple):
        (item_tp,) = typing.get_args(tp)[:1] or (Any,)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {_describe(value)}")
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {_describe(value)}")
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
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isfinite(float(value)):
                return float(value)
        elif isinstance(value, str):  # YAML 1.1 reads 1e-3 as a string
            try:
                number = float(value)
            except ValueError:
                number = None
            if number is not None and math.isfinite(number):
                return number
    elif tp is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"{key}: expected {_type_name(tp)}, got {_describe(value)}")


def _check_range(value, spec, key):
    if value is None:
        return
    lo, hi, lo_open, hi_open = spec
    ok = True
    if lo is not None:
        ok &= value > lo if lo_open else value >= lo
    if hi is not None:
        ok &= value < hi if hi_open else value <= hi
    if not ok:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        lo_s = "-inf" if lo is None else (f"{lo:g}" if isinstance(lo, float) else str(lo))
        hi_s = "inf" if hi is None else (f"{hi:g}" if isinstance(hi, float) else str(hi))
        raise ConfigError(f"{key}: {value!r} is out of range; allowed: {left}{lo_s}, {hi_s}{right}")


def build_dataclass(cls, data, prefix: str):
    """Build dataclass ``cls`` from the mapping ``data``, validating every key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix}: expected a mapping of keys, got {_describe(data)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            where = f"{prefix}.{key}" if prefix else str(key)
            raise ConfigError(f"unknown key '{where}'; allowed: {', '.join(names)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            kwargs[f.name] = build_dataclass(tp, data[f.name], key)
            continue
        value = _coerce(data[f.name], tp, key)
        if "range" in f.metadata:
            _check_range(value, f.metadata["range"], key)
        kwargs[f.name] = value
    return cls(**kwargs)


def _deep_merge(base: dict, update: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """``'a.b=3'`` -> (['a', 'b'], 3). The value is read as YAML (``true``, ``1e-3``, ``[1, 2]``)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected dotted.key=value, for example train.learning_rate=0.01")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text!r}: expected dotted.key=value, for example train.learning_rate=0.01")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_overrides(raw: dict, overrides) -> dict:
    raw = copy.deepcopy(raw)
    for text in overrides or ():
        path, value = parse_override(text)
        node = raw
        for i, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(path[: i + 1])
                raise ConfigError(f"--set {text!r}: '{where}' is not a section")
            node = child
        node[path[-1]] = value
    return raw


def load_yaml(path: str) -> dict:
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} does not exist")
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise ConfigError(f"config file {path!r} is not valid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path!r}: expected a mapping of sections at the top level")
    return data


def resolve(raw: dict, overrides=()) -> Config:
    """Validate a raw mapping (already read from YAML) plus ``--set`` overrides into a Config."""
    from gcl_tf import methods  # late import: the registry imports TensorFlow lazily

    raw = apply_overrides(raw, overrides)
    presets = raw.pop("presets", None) or {}
    if not isinstance(presets, dict):
        raise ConfigError("presets: expected a mapping from method name to settings")
    method_raw = raw.get("method") or {}
    if not isinstance(method_raw, dict):
        raise ConfigError(f"method: expected a mapping of keys, got {_describe(method_raw)}")
    name = method_raw.get("name", MethodConfig.name)
    allowed = ", ".join(methods.names())
    if not isinstance(name, str) or name not in methods.names():
        raise ConfigError(f"method.name: {_describe(name)} is not allowed; allowed: {allowed}")
    for preset_name, preset in presets.items():
        if preset_name not in methods.names():
            raise ConfigError(f"presets.{preset_name}: unknown method; allowed: {allowed}")
        if not isinstance(preset, dict):
            raise ConfigError(f"presets.{preset_name}: expected a mapping of sections")
    # Presets apply on top of the file, --set on top of the preset.
    if name in presets:
        base = {k: v for k, v in raw.items()}
        merged = _deep_merge(base, presets[name])
        raw = apply_overrides(merged, overrides)
        raw.pop("presets", None)
    method_cls = methods.config_class(name)
    sections = dict(raw)
    method_section = sections.pop("method", None) or {}
    config = build_dataclass(Config, sections, "")
    config.method = build_dataclass(method_cls, method_section, "method")
    _check_consistency(config)
    return config


def _check_consistency(config: Config) -> None:
    b = config.benchmark
    if b.source in ("idx", "npz", "folder") and not b.path:
        raise ConfigError(f"benchmark.path: required for source {b.source}; give the data location")
    if b.multi_head and b.name != "split":
        raise ConfigError("benchmark.multi_head: only the split protocol has per-task classes; allowed: false")
    if config.eval.split == "validation" and b.validation_fraction <= 0:
        raise ConfigError(
            "eval.split: validation needs benchmark.validation_fraction > 0; allowed: test, or set a fraction"
        )
    from gcl_tf import precision  # (no TensorFlow import)

    precision.check(config.method.name, config.train.mixed_precision)
    check_method = getattr(config.method, "check", None)
    if check_method is not None:  # a method's own cross-key rules
        check_method(config)
    if config.tune.space is not None:
        search_space(config, config.tune.space, config.tune.tuner)


# ----------------------------------------------------------------------------- search space
# The ``tune`` section's space, checked against the chosen method's keys (gcl_tf/tune.py runs it).

# Keys a search may not vary: they decide what a trial is and how it is scored.
_NOT_TUNABLE = ("method.name", "eval.split", "output_dir")
_RANGE_KEYS = ("min", "max", "log", "step")


def tunable_keys(config: Config) -> dict:
    """Every key a search may vary -> (its type annotation, its field metadata), in config order."""
    keys = {}

    def walk(obj, prefix):
        hints = typing.get_type_hints(type(obj))
        for f in dataclasses.fields(obj):
            key = prefix + f.name
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                if key != "tune":
                    walk(value, key + ".")
            elif key not in _NOT_TUNABLE:
                keys[key] = (hints[f.name], f.metadata)

    walk(config, "")
    return keys


def _unknown_space_key(key, keys: dict, where: str) -> str:
    if key in _NOT_TUNABLE or str(key).split(".")[0] in ("tune", "presets"):
        return f"{where}: '{key}' cannot be searched (it decides what a trial is and how it is scored)"
    section = str(key).split(".")[0] + "."
    same_section = [k for k in keys if k.startswith(section)]
    allowed = same_section or sorted({k.split(".")[0] + (".<key>" if "." in k else "") for k in keys})
    return f"{where}: unknown key '{key}'; allowed: {', '.join(allowed)}"


def _numeric_base(tp):
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if len(args) == 1 else None
    return tp if tp in (int, float) else None


def _choices(values, tp, metadata, where: str) -> list:
    if not values:
        raise ConfigError(f"{where}: the list of values is empty; give at least one value")
    out = []
    for i, value in enumerate(values):
        if value is None:
            raise ConfigError(f"{where}[{i}]: null cannot be a choice; allowed: {_type_name(tp).replace(' or null', '')}")
        value = _coerce(value, tp, f"{where}[{i}]")
        if "range" in metadata:
            _check_range(value, metadata["range"], f"{where}[{i}]")
        if value in out and type(value) is type(out[out.index(value)]):
            raise ConfigError(f"{where}[{i}]: {value!r} is listed twice; allowed: distinct values")
        out.append(value)
    if len({type(v) for v in out}) > 1:
        raise ConfigError(f"{where}: mixes value types ({', '.join(repr(v) for v in out)}); allowed: one type")
    return out


def _numeric_range(spec: dict, tp, metadata, where: str) -> dict:
    unknown = [k for k in spec if k not in _RANGE_KEYS]
    if unknown:
        raise ConfigError(f"{where}: unknown range key '{unknown[0]}'; allowed: {', '.join(_RANGE_KEYS)}")
    base = _numeric_base(tp)
    if base is None:
        raise ConfigError(f"{where}: a range needs a numeric key, this one takes {_type_name(tp)}; give a list of values")
    out = {}
    for bound in ("min", "max"):
        if spec.get(bound) is None:
            raise ConfigError(f"{where}: a range needs '{bound}'; allowed keys: {', '.join(_RANGE_KEYS)}")
        out[bound] = _coerce(spec[bound], base, f"{where}.{bound}")
        if "range" in metadata:
            _check_range(out[bound], metadata["range"], f"{where}.{bound}")
    if not out["min"] < out["max"]:
        raise ConfigError(f"{where}: min {out['min']!r} is not below max {out['max']!r}; allowed: min < max")
    out["log"] = _coerce(spec.get("log", False), bool, f"{where}.log")
    if out["log"] and out["min"] <= 0:
        raise ConfigError(f"{where}.log: a log range needs min > 0, got {out['min']!r}")
    step = spec.get("step")
    if step is not None:
        step = _coerce(step, base, f"{where}.step")
        _check_range(step, (0, None, True, False), f"{where}.step")
    out["step"] = step
    return out


def search_space(config: Config, space, tuner: str = "grid", where: str = "tune.space") -> dict:
    """Check a search space against ``config``'s keys (the chosen method's included).

    ``space`` maps dotted config keys to a list of values (choices) or to a numeric range
    ``{min, max, log, step}`` (random and bayesian tuners only). Returns the space with its
    values converted to the keys' types: ``{key: [values]}`` or ``{key: {min, max, log, step}}``.
    """
    if not isinstance(space, dict) or not space:
        raise ConfigError(
            f"{where}: expected a non-empty mapping from dotted config keys to lists of values "
            f"or {{min, max}} ranges, got {_describe(space)}"
        )
    keys = tunable_keys(config)
    out = {}
    for key, spec in space.items():
        if not isinstance(key, str) or key not in keys:
            raise ConfigError(_unknown_space_key(key, keys, where))
        tp, metadata = keys[key]
        name = f"{where}.{key}"
        if isinstance(spec, (list, tuple)):
            out[key] = _choices(list(spec), tp, metadata, name)
        elif isinstance(spec, dict):
            if tuner == "grid":
                raise ConfigError(f"{name}: a range needs the random or bayesian tuner; allowed for grid: a list of values")
            out[key] = _numeric_range(spec, tp, metadata, name)
        else:
            raise ConfigError(f"{name}: expected a list of values or a range {{min, max, log}}, got {_describe(spec)}")
    return out


def load_config(path: Optional[str] = None, overrides=()) -> Config:
    raw = load_yaml(path) if path else {}
    return resolve(raw, overrides)


def config_to_yaml(config: Config) -> str:
    data = config.to_dict()
    if config.tune == TuneConfig():  # only gcl_tf.tune reads it: leave the default out
        data.pop("tune")
    return yaml.safe_dump(data, sort_keys=False)
