"""What a search may search: a method's default grid (:func:`default_grid`) and the check of a
search space against a config's keys (the chosen method's included)."""
from __future__ import annotations

import copy
import dataclasses
import types
import typing

from gcl_tf.errors import ConfigError
from gcl_tf.schema import check_range, coerce, describe_value, did_you_mean, type_name

# The GCL paper's appendix "Hyper-parameters" grids (after GEM's): optimizer and learning rate for
# every method, plus a method's own keys, which its class declares (``tune_grid``: EWC's
# regularization, GEM's margin, MER's beta, GCL's graph weight and temperatures).
COMMON_GRID = {"train.optimizer": ["adam", "sgd"], "train.learning_rate": [0.0002, 0.001, 0.01, 0.1, 0.3, 1.0]}


def default_grid(method: str) -> dict:
    """The space a search of ``method`` covers without ``tune.space``: :data:`COMMON_GRID` with
    the method class's ``tune_grid`` on top (a key there replaces the common one)."""
    from gcl_tf import methods

    if method not in methods.names():
        raise ConfigError(f"tune.space: no default grid for method {method}; give tune.space in the config")
    return copy.deepcopy({**COMMON_GRID, **methods.method_class(method).tune_grid})


# ----------------------------------------------------------------------------- the check of a space

# Keys a search may not vary: they decide what a trial is and how it is scored.
_NOT_TUNABLE = ("method.name", "eval.split", "output_dir")
_RANGE_KEYS = ("min", "max", "log", "step")


def tunable_keys(config) -> dict:
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
    return f"{where}: unknown key '{key}'; {did_you_mean(key, keys)}allowed: {', '.join(allowed)}"


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
            allowed = type_name(tp).replace(' or null', '')
            raise ConfigError(f"{where}[{i}]: null cannot be a choice; allowed: {allowed}")
        value = coerce(value, tp, f"{where}[{i}]")
        if "range" in metadata:
            check_range(value, metadata["range"], f"{where}[{i}]")
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
        raise ConfigError(f"{where}: a range needs a numeric key, this one takes {type_name(tp)}; "
                          "give a list of values")
    out = {}
    for bound in ("min", "max"):
        if spec.get(bound) is None:
            raise ConfigError(f"{where}: a range needs '{bound}'; allowed keys: {', '.join(_RANGE_KEYS)}")
        out[bound] = coerce(spec[bound], base, f"{where}.{bound}")
        if "range" in metadata:
            check_range(out[bound], metadata["range"], f"{where}.{bound}")
    if not out["min"] < out["max"]:
        raise ConfigError(f"{where}: min {out['min']!r} is not below max {out['max']!r}; allowed: min < max")
    out["log"] = coerce(spec.get("log", False), bool, f"{where}.log")
    if out["log"] and out["min"] <= 0:
        raise ConfigError(f"{where}.log: a log range needs min > 0, got {out['min']!r}")
    step = spec.get("step")
    if step is not None:
        step = coerce(step, base, f"{where}.step")
        check_range(step, (0, None, True, False), f"{where}.step")
    out["step"] = step
    return out


def precheck_space(config, tuner: str, where: str = "tune.space") -> None:
    """``config``'s ``tune.space`` checked before TensorFlow loads (``config`` from
    gcl_tf.config.precheck): every key's name, and the values of the run's sections' keys; a
    method key's values are checked with the method (:func:`search_space`). No space: the
    method's default grid, from its class."""
    space = config.tune.space
    if space is None:
        return
    _check_mapping(space, where)
    keys = tunable_keys(config)
    method = {f"method.{f.name}": None for f in dataclasses.fields(config.method) if f.name != "name"}
    for key in space:
        if key not in keys and key not in method:
            raise ConfigError(_unknown_space_key(key, {**keys, **method}, where))
    own = {key: spec for key, spec in space.items() if key in keys}
    if own:
        search_space(config, own, tuner, where)


def _check_mapping(space, where: str) -> None:
    if not isinstance(space, dict) or not space:
        raise ConfigError(
            f"{where}: expected a non-empty mapping from dotted config keys to lists of values "
            f"or {{min, max}} ranges, got {describe_value(space)}"
        )


def search_space(config, space, tuner: str = "grid", where: str = "tune.space") -> dict:
    """Check a search space against ``config``'s keys (the chosen method's included).

    ``space`` maps dotted config keys to a list of values (choices) or to a numeric range
    ``{min, max, log, step}`` (random and bayesian tuners only). Returns the space with its
    values converted to the keys' types: ``{key: [values]}`` or ``{key: {min, max, log, step}}``.
    """
    _check_mapping(space, where)
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
                raise ConfigError(f"{name}: a range needs the random or bayesian tuner; "
                                  "allowed for grid: a list of values")
            out[key] = _numeric_range(spec, tp, metadata, name)
        else:
            raise ConfigError(f"{name}: expected a list of values or a range {{min, max, log}}, "
                              f"got {describe_value(spec)}")
    return out
