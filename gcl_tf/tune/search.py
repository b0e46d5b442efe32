"""A search's plan (:class:`Search`: the config, its space, the tuner, the folder) and what a
trial leaves behind (its finished run, its HParams logs)."""
from __future__ import annotations

import copy
import json
import math
import os

from gcl_tf import config as config_lib
from gcl_tf import config_dicts
from gcl_tf.errors import UserError
from gcl_tf.io import read_json
from gcl_tf.run_layout import RESULT_NEUTRAL_KEYS, RESULTS, SEARCH_FILE
from gcl_tf.tune.space import default_grid, search_space

OBJECTIVE = "val_acc"  # the trial's ACC (percent) on the validation splits; maximised
DEFAULT_RANDOM_TRIALS = 10  # KerasTuner's own default for random and bayesian search


# ----------------------------------------------------------------------------- what is searched
def _set_text(key: str, value) -> str:
    """A ``--set`` override for ``value`` (JSON is valid YAML; the config reads numbers back exactly)."""
    return f"{key}={json.dumps(value)}"


def _plain(obj):
    """JSON round trip: the form in which configs are stored and compared."""
    return json.loads(json.dumps(obj))


def format_values(values: dict) -> str:
    return "  ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


def default_initial_points(searched_keys: int, max_trials: int) -> int:
    """Random trials a Bayesian search starts with: KerasTuner's 3 per searched key, but at most
    a third of the budget (so that the Gaussian process picks at least two thirds) and at least 3."""
    return max(3, min(3 * searched_keys, max_trials // 3))


def default_output(config) -> str:
    """A search's folder without ``--output``: the config's ``output_dir`` + ``-tune``."""
    return f"{config.output_dir.rstrip('/')}-tune"


class Search:
    """A search: the config file (+ ``--set``), its space, the tuner and the output folder."""

    def __init__(self, raw: dict, overrides=(), tuner=None, max_trials=None, output_dir=None, trial_verbose=0):
        self.raw = copy.deepcopy(raw)
        self.trial_verbose = trial_verbose  # Keras progress inside each trial (0: only a line per trial)
        self.local_workers = 0  # > 0: this process is the chief of that many local workers (tune.local)
        self.overrides = list(overrides)
        cli = []
        if tuner is not None:
            cli.append(_set_text("tune.tuner", tuner))
        if max_trials is not None:
            cli.append(_set_text("tune.max_trials", max_trials))
        self.overrides += cli
        base = config_lib.resolve(self.raw, self.overrides)
        self.tuner = base.tune.tuner
        self.method = base.method.name
        if base.tune.space is None:
            space, where = default_grid(self.method), f"default grid of {self.method}"
        else:
            space, where = base.tune.space, "tune.space"
        self.space = search_space(base, space, self.tuner, where=where)
        self.default_space = base.tune.space is None
        self.grid_size = math.prod(len(v) for v in self.space.values() if isinstance(v, list))
        if base.tune.max_trials is not None:
            self.max_trials = base.tune.max_trials
        else:
            self.max_trials = self.grid_size if self.tuner == "grid" else DEFAULT_RANDOM_TRIALS
        # Trials always score on validation data; a config without a validation split gets one.
        self.forced = [_set_text("eval.split", "validation")]
        self.added_validation = base.benchmark.validation_fraction <= 0
        if self.added_validation:
            self.forced.append(_set_text("benchmark.validation_fraction", base.tune.validation_fraction))
        searched = sum(not isinstance(v, list) or len(v) > 1 for v in self.space.values())
        self.initial_points = base.tune.initial_points or default_initial_points(searched, self.max_trials)
        self.validation_fraction = (base.tune.validation_fraction if self.added_validation
                                    else base.benchmark.validation_fraction)
        self.output_dir = output_dir or default_output(base)
        self.base = self.trial_config({})  # checks the forced settings once
        self._benchmark = (None, None)

    @classmethod
    def from_file(cls, path, overrides=(), **kwargs):
        return cls(config_lib.read_config(path), overrides, **kwargs)

    def _resolve(self, values: dict, extra=()) -> config_lib.Config:
        overrides = self.overrides + list(extra) + [_set_text(k, v) for k, v in values.items()]
        config = config_lib.resolve(self.raw, overrides)
        config.tune = config_lib.TuneConfig()  # a trial is a plain training run
        return config

    def trial_config(self, values: dict, output_dir=None) -> config_lib.Config:
        """The run of one trial: the config, the trial's values, evaluation on validation splits."""
        config = self._resolve(values, self.forced)
        if output_dir is not None:
            config.output_dir = output_dir
        return config

    def best_config(self, values: dict) -> config_lib.Config:
        """The chosen configuration for ``gcl_tf.train``: the user's own settings, evaluated on test."""
        config = self._resolve(values, [_set_text("eval.split", "test")])
        config.output_dir = os.path.join(self.output_dir, "best")
        return config

    def benchmark_for(self, config):
        """The validation-only benchmark of a trial (the test split is not loaded), built once
        while the trials' benchmark settings and seed stay the same."""
        from gcl_tf.data import ContinualBenchmark

        key = json.dumps(_plain([config.benchmark.__dict__, config.seed]), sort_keys=True)
        if self._benchmark[0] != key:
            self._benchmark = (None, None)  # free the previous one first
            self._benchmark = (key, ContinualBenchmark(config.benchmark, config.seed, load_test=False))
        return self._benchmark[1]

    def description(self) -> dict:
        """What a resumed search (or a worker) must share with the search it continues."""
        return _plain({"tuner": self.tuner, "space": self.space,
                       "config": _searched_config(self.base.to_dict(), self.space)})


def _searched_config(config: dict, searched=()) -> dict:
    """A config dictionary without what does not change a search: its folder, its verbosity, and
    the ``searched`` dotted keys (every trial sets them, so the values they start from do not
    matter: a preset may take a search's best trial and the search still resumes)."""
    return config_dicts.without_keys(_plain(config), ["output_dir", "train.verbose", *searched])


def finished_run(folder: str, config) -> dict | None:
    """The results of a run already finished in ``folder`` with this config (but the keys that do
    not change results: a trial interrupted after its run ended is not trained again), else None."""
    path = os.path.join(folder, RESULTS)
    if not os.path.exists(path):
        return None
    try:
        results = read_json(path)
    except (OSError, ValueError):
        return None
    saved = config_lib.saved_as_today(results.get("config") or {})  # a key added since took its default
    same = not config_dicts.describe_differences(_plain(saved), _plain(config.to_dict()), RESULT_NEUTRAL_KEYS)
    if same and results.get("eval_split") == "validation":
        return results
    return None


def can_resume(output_dir: str, config) -> bool:
    """True when ``output_dir`` holds checkpoints of an unfinished run of ``config`` (one stopped
    by a signal): a trial, or a run of ``gcl_tf.tune.adopt``, goes on with ``resume=True`` (else it
    starts again, overwriting it)."""
    from gcl_tf import train as train_lib
    from gcl_tf.checkpoint import saved_checkpoints

    if os.path.exists(os.path.join(output_dir, RESULTS)) or not saved_checkpoints(output_dir):
        return False
    try:
        train_lib.check_resumable(output_dir, config)
    except UserError:
        return False
    return True


def _hparams_domain(spec):
    from tensorboard.plugins.hparams import api as hp_api

    if isinstance(spec, list):
        values = [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in spec]
        return hp_api.Discrete(values)
    if isinstance(spec["min"], int):
        return hp_api.IntInterval(spec["min"], spec["max"])
    return hp_api.RealInterval(float(spec["min"]), float(spec["max"]))


_HPARAMS_METRICS = (("tune/val_acc", "validation ACC"), ("tune/val_fgt", "validation FGT"))


def log_hparams(logdir: str, values: dict, metrics: dict, trial_id, step: int) -> None:
    """The trial's values and scores for TensorBoard's HParams dashboard (in the run's own log folder)."""
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp_api

    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        hp_api.hparams(values, trial_id=f"trial_{trial_id}")
        tf.summary.scalar("tune/val_acc", metrics[OBJECTIVE], step=step)
        if "val_fgt" in metrics:
            tf.summary.scalar("tune/val_fgt", metrics["val_fgt"], step=step)
    writer.flush()
    writer.close()


def log_hparams_config(search: Search) -> None:
    """The experiment's hyper-parameters and metrics, at the top of ``DIR`` (``tensorboard --logdir DIR``)."""
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp_api

    hparams = [hp_api.HParam(key, _hparams_domain(spec)) for key, spec in search.space.items()]
    metrics = [hp_api.Metric(tag, display_name=name) for tag, name in _HPARAMS_METRICS]
    writer = tf.summary.create_file_writer(search.output_dir)
    with writer.as_default():
        hp_api.hparams_config(hparams=hparams, metrics=metrics)
    writer.flush()
    writer.close()


def check_same_search(search: Search) -> None:
    """A resumed search (or a worker) must search what the saved search searches."""
    path = os.path.join(search.output_dir, SEARCH_FILE)
    if not os.path.exists(path):
        return
    try:
        saved = read_json(path)
    except (OSError, ValueError):
        raise UserError(f"{path} is not valid JSON; pass --overwrite to start the search again") from None
    mine = search.description()
    if isinstance(saved.get("config"), dict):  # a key added since the search began took its default
        saved["config"] = _searched_config(config_lib.saved_as_today(saved["config"]), saved.get("space") or {})
    for part in ("tuner", "space", "config"):
        if saved.get(part) != mine[part]:
            what = part
            if part == "config":
                diff = _first_difference(saved.get(part), mine[part])
                what = f"config ({diff})"
            raise UserError(
                f"{search.output_dir} holds a search with a different {what}; run it with the same "
                f"config and tuner, or pass --overwrite to start again, or choose another --output"
            )


def _first_difference(a, b, prefix="") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{prefix}{key}.")
    return f"{prefix.rstrip('.')}: {a!r} then, {b!r} now"

