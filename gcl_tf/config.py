"""Typed, validated experiment configuration: YAML file + ``--set dotted.key=value`` overrides.

A config file has the sections ``benchmark``, ``method``, ``model``, ``train``, ``eval`` and the
top-level keys ``seed`` and ``output_dir``. It may also hold ``presets``: per-method settings
(any of the sections above) applied on top of the rest of the file when ``method.name`` selects
that method. ``--set`` overrides apply last, so ``--set method.name=er`` picks the ER preset.

Every key is checked against the dataclasses below (and, for ``method``, against the chosen
method's own dataclass in ``gcl_tf/methods/configs.py``) by :mod:`gcl_tf.schema`. An unknown
key, a wrong type or a value outside its allowed set raises :class:`~gcl_tf.errors.ConfigError`
with one line naming the key and what is allowed. The ``tune`` section's search space is checked
by :mod:`gcl_tf.tune` (only a search reads it).

Layers: :mod:`gcl_tf.schema` (validation) <- :mod:`gcl_tf.data.config` (the ``benchmark`` keys)
and :mod:`gcl_tf.methods` (each method's keys) <- this module (the whole run's config): no import
runs back up. The file and the ``--set`` overrides are read by :mod:`gcl_tf.config_dicts`.
"""
from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Literal, Optional, Union

import yaml

from gcl_tf import methods, precision, run_layout
from gcl_tf.config_dicts import (  # noqa: F401 (re-exported: gcl_tf.config is where callers read them)
    _deep_merge,
    apply_overrides,
    describe_differences,
    flat_keys,
    load_yaml,
    parse_override,
    without_keys,
)
from gcl_tf.data.config import BenchmarkConfig, settle_color_mode
from gcl_tf.errors import ConfigError
from gcl_tf.method_hints import of_another_method
from gcl_tf.schema import MethodConfig, build_dataclass, describe_value, did_you_mean, value_range

# Sources read from benchmark.path (the others: scikit-learn's digits, TFDS).
LOCAL_SOURCES = ("idx", "npz", "folder")


@dataclass
class ModelConfig:
    backbone: Literal["mlp", "convnet", "resnet18"] = "mlp"
    # Width of the MLP's hidden layers (GCL: also the size of its embeddings).
    hidden_size: int = field(default=256, metadata=value_range(1))
    # Convolution filters (null: the paper's, 64 for convnet and 20 for resnet18).
    filters: Optional[int] = field(default=None, metadata=value_range(1))
    # Initial weights of the Dense and Conv2D layers that keep the framework's default: keras
    # (Glorot uniform kernels, zero biases) or torch (PyTorch's nn.Linear / nn.Conv2d default,
    # U(+-1/sqrt(fan_in)) kernels and biases, as GEM's ResNet-18 and MLP were written with).
    # Layers initialised on purpose (the ConvNet's Kaiming normal) keep theirs.
    initializer: Literal["keras", "torch"] = "keras"


@dataclass
class TrainConfig:
    batch_size: int = field(default=10, metadata=value_range(1))
    epochs: int = field(default=1, metadata=value_range(1))
    # sgd, adam, or adamw: Adam with decoupled weight decay (keras.optimizers.AdamW, PyTorch's AdamW:
    # each step also multiplies every weight by 1 - learning_rate * weight_decay; CCL-DC's re-runs).
    optimizer: Literal["sgd", "adam", "adamw"] = "sgd"
    learning_rate: float = field(default=0.1, metadata=value_range(0.0, lo_open=True))
    # adamw's decoupled weight decay (CCL-DC: 1e-4); only adamw takes one other than 0.
    weight_decay: float = field(default=0.0, metadata=value_range(0.0, 1.0, hi_open=True))
    # Evaluate with an exponential moving average of the weights (Polyak averaging; keras.optimizers'
    # use_ema with this ema_momentum): every step the optimizer also updates avg = m avg + (1 - m) w,
    # and every evaluation and prediction reads the averages, while the learner goes on learning
    # from its own weights (MKD's teacher, ICML 2024; Soutif-Cormerais et al. 2023's temporal
    # ensemble). BatchNorm's moving statistics are the learner's. null: no average (the paper).
    ema_momentum: Optional[float] = field(default=None, metadata=value_range(0.0, 1.0, lo_open=True, hi_open=True))
    # Compile the training step with XLA: true, false, or auto (by device type: off on CPU, where
    # XLA measured slower; on on a GPU; gcl_tf/devices.py, docs/gpu.md).
    jit_compile: Union[bool, Literal["auto"]] = "auto"
    # Keras dtype policy of the layers: float32, or mixed precision (float16 with loss scaling, or
    # bfloat16); losses and GCL's graph math stay float32 (gcl_tf/precision.py, docs/gpu.md).
    mixed_precision: Literal["float32", "mixed_float16", "mixed_bfloat16"] = "float32"
    # Training steps run per call of the compiled function (Keras steps_per_execution).
    steps_per_execution: int = field(default=1, metadata=value_range(1))
    # Write per-step loss terms to TensorBoard every this many steps (0: never).
    log_every: int = field(default=10, metadata=value_range(0))
    # tf.distribute strategy: none (one device), mirrored (the local devices, or train.devices),
    # multi_worker (MultiWorkerMirroredStrategy, workers from the TF_CONFIG environment variable).
    # The batch sizes are global: they must split evenly over the replicas.
    distribute: Literal["none", "mirrored", "multi_worker"] = "none"
    # Devices for distribute: mirrored, e.g. ["/cpu:0", "/cpu:1"] (null: all local GPUs, else the CPU).
    devices: Optional[list[str]] = None
    # Progress: 0 silent; 1 Keras's bar on a terminal, and in a log file (stdout not a terminal) a line
    # per task and our progress line about once a minute (step, rate, time left); 2 also Keras's line per epoch.
    verbose: int = field(default=1, metadata=value_range(0, 2))
    # Save a checkpoint (DIR/checkpoints) every this many training steps, and always at the end of
    # every task; 0: only at task ends. `python -m gcl_tf.train ... --resume` continues from the last.
    checkpoint_every: int = field(default=500, metadata=value_range(0))
    # Op determinism (tf.config.experimental.enable_op_determinism): a run is bit-identical for
    # its seed (the --deterministic option sets it).
    deterministic: bool = False


@dataclass
class EvalConfig:
    batch_size: int = field(default=500, metadata=value_range(1))
    # Which split fills the accuracy matrix: test, or the validation split carved from each
    # task's training data (for tuning: the test split is then never read).
    split: Literal["test", "validation"] = "test"


@dataclass
class TuneConfig:
    """Hyper-parameter search (``python -m gcl_tf.tune``); ``gcl_tf.train`` ignores this section."""

    # Search space: {dotted.config.key: [values, ...]} (choices) or {dotted.config.key: {min, max,
    # log, step}} (a numeric range: random and bayesian tuners only). null: the chosen method's
    # default grid (gcl_tf/tune/space.py default_grid: the GCL paper's appendix grids).
    space: Optional[dict] = None
    tuner: Literal["grid", "random", "bayesian"] = "grid"
    # Trials at most (null: the whole grid; 10 for random and bayesian).
    max_trials: Optional[int] = field(default=None, metadata=value_range(1))
    # bayesian: random trials before the Gaussian process picks the next ones (null: 3 per
    # searched key, but at most a third of max_trials and at least 3; KerasTuner's own default,
    # 3 per key, would leave a 24-trial search of 8 keys nothing but random trials).
    initial_points: Optional[int] = field(default=None, metadata=value_range(1))
    # Validation share of each task's training samples used when benchmark.validation_fraction
    # is 0 (a search always scores trials on validation splits, never on the test split).
    validation_fraction: float = field(default=0.1, metadata=value_range(0.0, 1.0, lo_open=True, hi_open=True))


@dataclass
class Config:
    # Seeds NumPy, TensorFlow and Keras, which take 0 .. 2**32 - 1.
    seed: int = field(default=0, metadata=value_range(0, 2**32 - 1))
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    method: MethodConfig = field(default_factory=lambda: MethodConfig(name=methods.DEFAULT))
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    output_dir: str = "runs/default"
    # A finished run's folder: this run starts from its learner (DIR/learner.keras: weights,
    # optimizer state and memory) instead of a new one, and learns this config's tasks after the
    # learner's (docs/api.md, "Keep learning later"). null: a new learner.
    init_from: Optional[str] = None
    tune: TuneConfig = field(default_factory=TuneConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def resolve(raw: dict, overrides=()) -> Config:
    """Validate a raw mapping (already read from YAML) plus ``--set`` overrides into a Config.

    The method's own keys are checked last, against its ``Config`` (the registry's, no
    TensorFlow: a command line checks the whole config in well under a second), then the rules
    between them and the rest of the run (:meth:`~gcl_tf.schema.MethodConfig.check`, the
    precision the method supports)."""
    raw, presets, name = _with_preset(raw, overrides)
    for preset_name, preset in presets.items():
        _check_preset(preset_name, preset)
    sections = dict(raw)
    method_section = sections.pop("method", None) or {}
    config = build_dataclass(Config, sections, "")
    config.method = MethodConfig(name=name)
    _check_consistency(config)
    config.benchmark.color_mode = settle_color_mode(config.benchmark)  # null: the folder's images' own
    for preset_name, preset in presets.items():
        _check_preset(preset_name, preset, methods.config_class(preset_name))
    # the selected name, whatever the default of the method's Config says
    try:
        config.method = build_dataclass(methods.config_class(name), {**method_section, "name": name}, "method")
    except ConfigError as error:  # a key of another method: say whose (issue 71)
        raise of_another_method(error, name, method_section, methods.config_class) from None
    precision.check(name, config.train.mixed_precision, loss_scaling=config.method.supports_loss_scaling)
    config.method.check(config)  # the method's own rules
    return config


def _with_preset(raw: dict, overrides=()) -> tuple:
    """``(raw, presets, method name)``: the file's mapping with the selected method's preset
    merged on top and the ``--set`` overrides on top of both, without ``presets``."""
    raw = apply_overrides(raw, overrides)
    presets = _presets(raw.pop("presets", None) or {})
    name = _method_name(raw.get("method") or {})
    if name in presets:  # presets apply on top of the file, --set on top of the preset
        raw = apply_overrides(_deep_merge(raw, presets[name]), overrides)
        raw.pop("presets", None)
    return raw, presets, name


def _method_name(method_raw) -> str:
    if not isinstance(method_raw, dict):
        raise ConfigError(f"method: expected a mapping of keys, got {describe_value(method_raw)}")
    name = method_raw.get("name", methods.DEFAULT)
    if not isinstance(name, str) or name not in methods.names():
        raise ConfigError(f"method.name: {describe_value(name)} is not allowed; {_allowed_methods(name)}")
    return name


def _allowed_methods(name) -> str:
    """``did you mean X? allowed: ...`` for a method name that is not one."""
    return did_you_mean(name, methods.names()) + f"allowed: {', '.join(methods.names())}"


def _presets(presets) -> dict:
    if not isinstance(presets, dict):
        raise ConfigError("presets: expected a mapping from method name to settings")
    for preset_name, preset in presets.items():
        if preset_name not in methods.names():
            raise ConfigError(f"presets.{preset_name}: unknown method; {_allowed_methods(preset_name)}")
        if not isinstance(preset, dict):
            raise ConfigError(f"presets.{preset_name}: expected a mapping of sections")
    return presets


def _check_preset(preset_name: str, preset: dict, method_cls=None) -> None:
    """Every key of every preset, selected or not, checked against the run's sections or, with
    ``method_cls``, its method's config (names, types, ranges), so any run of the file catches a
    typo and the message names the preset."""
    sections = dict(preset)
    method_section = sections.pop("method", None) or {}
    try:
        if method_cls is None:
            build_dataclass(Config, sections, "")
        else:
            build_dataclass(method_cls, method_section, "method")
    except ConfigError as error:
        raise ConfigError(f"presets.{preset_name}: {error}") from None


def _check_consistency(config: Config) -> None:
    """The rules between keys of the run's sections (not the method's own keys)."""
    b = config.benchmark
    if b.source in LOCAL_SOURCES and not b.path:
        raise ConfigError(f"benchmark.path: required for source {b.source}; give the data location")
    if b.class_order != "fixed" and b.name != "split":
        raise ConfigError(f"benchmark.class_order: {b.name} tasks each hold every class; allowed: fixed, or "
                          "benchmark.name: split")
    if b.multi_head and b.name != "split":
        raise ConfigError("benchmark.multi_head: only the split protocol has per-task classes; allowed: false")
    if b.tasks is not None:
        bad = [t for t in b.tasks if not 0 <= t < b.num_tasks]
        if bad or len(set(b.tasks)) != len(b.tasks) or not b.tasks:
            what = f"{bad[0]} is not a task of the {b.num_tasks}" if bad else "tasks repeat or none is given among the"
            raise ConfigError(f"benchmark.tasks: {what} (benchmark.num_tasks); allowed: distinct indices from 0 to "
                              f"{b.num_tasks - 1}, or null for all")
    if config.train.weight_decay > 0 and config.train.optimizer != "adamw":
        raise ConfigError(f"train.weight_decay: {config.train.optimizer} takes none "
                          f"(got {config.train.weight_decay:g}); "
                          "allowed: 0, or train.optimizer: adamw (decoupled weight decay)")
    if config.eval.split == "validation" and b.validation_fraction <= 0:
        raise ConfigError(
            "eval.split: validation needs benchmark.validation_fraction > 0; allowed: test, or set a fraction"
        )


def missing_data_path(benchmark) -> str | None:
    """The one-line problem when a local source's ``benchmark.path`` does not exist (what its
    loader would say, checked before anything loads), else None."""
    if benchmark.source == "npz" and not os.path.isfile(benchmark.path):
        return f"benchmark.path: file {benchmark.path!r} does not exist"
    if benchmark.source in ("idx", "folder") and not os.path.isdir(benchmark.path):
        return f"benchmark.path: folder {benchmark.path!r} does not exist"
    return None


def with_former_defaults(saved: dict) -> dict:
    """A config dictionary an earlier run saved, with each key of its method's ``former_defaults``
    (keys whose default changed since) that it lacks set to that former default: the run, saved
    before the key or its new default existed, ran with it. (A config saved since holds every key.)"""
    saved = copy.deepcopy(saved)
    method = saved.get("method")
    if isinstance(method, dict) and method.get("name") in methods.REGISTRY:
        for key, value in methods.config_class(method["name"]).former_defaults.items():
            method.setdefault(key, value)
    return saved


def saved_as_today(saved: dict) -> dict:
    """A config dictionary an earlier run or search saved, read through today's keys, as
    ``--resume`` reads a run's config.yaml: a key added since takes its default (a new key's
    default keeps the behaviour the run had), a key whose default changed since its former one
    (:func:`with_former_defaults`). As saved when it no longer resolves (a key removed since), so
    that a comparison names that key."""
    try:
        return resolve(with_former_defaults(saved)).to_dict()
    except ConfigError:
        return saved


def saved_by_gcl_tf(path: str) -> bool:
    """Whether the YAML file at ``path`` is one a run or a search saved: its folder holds that run's
    or search's other files (:data:`gcl_tf.run_layout.SAVED_BESIDE_CONFIG`)."""
    folder = os.path.dirname(os.path.abspath(path))
    return any(os.path.exists(os.path.join(folder, name)) for name in run_layout.SAVED_BESIDE_CONFIG)


def read_config(path: str) -> dict:
    """A config file's mapping; a file a run or search saved (:func:`saved_by_gcl_tf`) as that run
    ran (:func:`with_former_defaults`), so that ``--config RUN/config.yaml`` (``--resume``, a rerun
    elsewhere) trains what that run trained even when a default changed since."""
    raw = load_yaml(path)
    return with_former_defaults(raw) if saved_by_gcl_tf(path) else raw


def load_saved_config(path: str) -> Config:
    """The config.yaml a run saved, as that run ran (:func:`with_former_defaults`)."""
    return resolve(with_former_defaults(load_yaml(path)))


def load_config(path: Optional[str] = None, overrides=()) -> Config:
    """The config of a YAML file and ``--set`` overrides."""
    return resolve(read_config(path) if path else {}, overrides)


def precheck(path: str, overrides=()) -> Config:
    """What a command line checks before TensorFlow loads (well under a second): the config
    (:func:`load_config`: the file, its YAML, every key and the ``--set`` overrides, names, types,
    ranges and the rules between them) and the data's path."""
    from gcl_tf.errors import DataError

    config = load_config(path, overrides)
    problem = missing_data_path(config.benchmark)
    if problem:
        raise DataError(problem)
    from gcl_tf import method_hints
    from gcl_tf.data import known  # the dataset's name and the sizes its arrays take (issue 71)

    known.precheck(config)
    method_hints.precheck(config)  # benchmark.augment in the step of a method that takes none
    return config


def config_to_yaml(config: Config) -> str:
    data = config.to_dict()
    if config.tune == TuneConfig():  # only gcl_tf.tune reads it: leave the default out
        data.pop("tune")
    return yaml.safe_dump(data, sort_keys=False)
