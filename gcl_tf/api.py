"""``gcl_tf.run``: a whole run from a config, as ``python -m gcl_tf.train`` does it, returning
its :class:`Results`; ``gcl_tf.load_model``: a learner saved whole (gcl_tf/saving.py)."""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np


@dataclass
class Results:
    """What a run wrote to ``results.json``: the accuracy matrix ``R[i][j]`` (percent, on task j
    after training task i) and its summaries (``acc``, ``fgt``, ``bwt``, ``learning_accuracy``);
    every other entry of the file through ``results["key"]``."""

    accuracy_matrix: np.ndarray
    acc: float
    fgt: float
    bwt: float
    learning_accuracy: float
    output_dir: Optional[str] = None
    details: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, results: dict, output_dir: Optional[str] = None) -> "Results":
        return cls(np.asarray(results["accuracy_matrix"], float), float(results["acc"]), float(results["fgt"]),
                   float(results["bwt"]), float(results["learning_accuracy"]), output_dir, dict(results))

    def __getitem__(self, key):
        return self.details[key]

    def __str__(self) -> str:
        rows = "\n".join("  " + " ".join(f"{v:6.2f}" for v in row) for row in self.accuracy_matrix)
        return f"ACC {self.acc:.2f}  FGT {self.fgt:.2f}  BWT {self.bwt:.2f}\naccuracy matrix (%):\n{rows}"


def _set(raw: dict, path: list, value) -> None:
    node = raw
    for part in path[:-1]:
        node = node.setdefault(part, {})
    if isinstance(value, dict) and isinstance(node.get(path[-1]), dict):
        node[path[-1]] = {**node[path[-1]], **value}
    else:
        node[path[-1]] = value


def run(config_or_path, output_dir: Optional[str] = None, overwrite: bool = False, verbose: Optional[int] = None,
        resume: bool = False, **overrides) -> Results:
    """Train and evaluate one configuration, as the CLI does; returns its :class:`Results`.

    ``config_or_path``: a YAML file, a mapping of its sections or a :class:`gcl_tf.config.Config`.
    ``overrides`` replace keys: a section's keys as a mapping (``method={"name": "er"}``),
    dotted keys (``**{"train.epochs": 2}``) or top-level keys (``seed=1``). The run writes its
    folder (``output_dir``, default: the config's) as ``python -m gcl_tf.train`` does, and refuses
    what it refuses (a :class:`gcl_tf.errors.UserError` of one line, naming ``overwrite=True``,
    ``resume=True`` or ``output_dir`` where the command line names its options).
    """
    from gcl_tf import config as config_lib
    from gcl_tf import train
    from gcl_tf.errors import UserError, in_api_words

    if isinstance(config_or_path, (str, os.PathLike)):
        raw = config_lib.read_config(os.fspath(config_or_path))
    elif isinstance(config_or_path, config_lib.Config):
        raw = config_or_path.to_dict()
    else:
        raw = copy.deepcopy(dict(config_or_path))
    for key, value in overrides.items():
        _set(raw, key.split("."), value)
    config = config_lib.resolve(raw)
    output_dir = output_dir or config.output_dir
    try:
        if overwrite:  # only a run of gcl_tf.train there, as the command line's --overwrite
            from gcl_tf.prechecks import train_folder

            train_folder(output_dir, config, overwrite)
        results = train.run(config, output_dir=output_dir, overwrite=overwrite, verbose=verbose, resume=resume)
    except UserError as error:  # what to do, in this function's keywords (resume=True, not --resume)
        raise in_api_words(error) from None
    return Results.from_dict(results, output_dir)


def load_model(path, compile: bool = True):
    """``keras.models.load_model(path)`` with every gcl_tf method registered: the learner saved
    by ``model.save(path)`` (or a run's ``DIR/learner.keras``), ready to predict and to go on
    learning (``compile=False``: without its optimizer, and so without the weights' moving average
    that a run with ``train.ema_momentum`` evaluates: such a learner then predicts with its learned
    weights, not as its run reported)."""
    import keras

    from gcl_tf import methods

    for name in methods.names():
        methods.module(name)
    return keras.models.load_model(os.fspath(path), compile=compile)
