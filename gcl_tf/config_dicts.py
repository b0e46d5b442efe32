"""Config mappings before they are typed: a YAML config file read (:func:`load_yaml`), ``--set
dotted.key=value`` overrides applied (:func:`apply_overrides`), and two config dictionaries
compared key by key (:func:`describe_differences`). Plain dictionaries and YAML: no TensorFlow,
nothing of the config's dataclasses (gcl_tf/config.py types and checks what these return)."""
from __future__ import annotations

import copy
import functools
import glob
import os
from typing import Any

import yaml

from gcl_tf.errors import ConfigError


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
    """A config file's mapping (a copy: the file is parsed once while it stays the same); one line
    when it is missing, a folder, not YAML, not a mapping or empty (no key: a config says at
    least what to learn, with what)."""
    if os.path.isdir(path):
        examples = sorted(glob.glob(os.path.join(glob.escape(path), "*.yaml")))[:3]
        raise ConfigError(f"config file {path!r} is a folder; allowed: a YAML file"
                          + (f", e.g. {', '.join(examples)}" if examples else ""))
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} does not exist")
    stat = os.stat(path)
    try:
        data = copy.deepcopy(_parsed_yaml(os.path.abspath(path), stat.st_mtime_ns, stat.st_size))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise ConfigError(f"config file {path!r} is not valid YAML{where}: {problem}") from None
    if data is None or data == {}:
        raise ConfigError(f"config file {path!r} is empty: it names no benchmark and no method; allowed: a mapping "
                          "of the sections benchmark, method, model, train, eval (and seed, output_dir), e.g. "
                          "configs/quickstart.yaml")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path!r}: expected a mapping of sections at the top level")
    return data


@functools.lru_cache(maxsize=32)
def _parsed_yaml(path: str, mtime_ns: int, size: int):
    """The YAML of ``path`` as it was at ``mtime_ns`` and ``size`` (a suite plans hundreds of runs
    from a few files)."""
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def flat_keys(data: dict, prefix: str = "") -> dict:
    """A config dictionary's values by dotted key (``{"train.batch_size": 10, ...}``)."""
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flat_keys(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def without_keys(data: dict, dotted_keys) -> dict:
    """A copy of a config dictionary without the ``dotted_keys`` (``"train.verbose"``; absent
    keys are no error)."""
    out = copy.deepcopy(data)
    for dotted in dotted_keys:
        *parents, key = str(dotted).split(".")
        node = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(key, None)
    return out


def describe_differences(before: dict, after: dict, ignored=()) -> str:
    """The dotted keys whose values differ between two config dictionaries (nested or flat;
    ``ignored`` keys and sections left out), the first three as ``key (before -> after)`` in one
    line; "" when none differs."""
    def keep(key):
        return not any(key == k or key.startswith(k + ".") for k in ignored)

    a, b = flat_keys(before), flat_keys(after)
    keys = [k for k in dict.fromkeys(list(a) + list(b)) if keep(k)]
    shown = [f"{k} ({a.get(k, '<absent>')!r} -> {b.get(k, '<absent>')!r})" for k in keys if a.get(k) != b.get(k)]
    return "; ".join(shown[:3]) + ("; ..." if len(shown) > 3 else "")
