"""Hyper-parameter search with KerasTuner: ``python -m gcl_tf.tune --config FILE --tuner grid|random|bayesian``.

One trial is one whole continual run (:func:`gcl_tf.train.run`) of the config with the trial's
values applied as ``--set`` overrides, scored by its ACC on validation splits carved from each
task's training data (``eval.split: validation``); the test split is never read. The space is
the config's ``tune.space``, or the GCL paper's appendix grid for the chosen method
(:data:`PAPER_GRIDS`).

KerasTuner does the searching: its oracles pick the trials, an interrupted search resumes from
``DIR`` (finished trials are not run again) and a chief with workers share one search when
``KERASTUNER_TUNER_ID``, ``KERASTUNER_ORACLE_IP`` and ``KERASTUNER_ORACLE_PORT`` are set.
Writes, under ``DIR``: KerasTuner's state (``oracle.json``, ``trial_*/trial.json``), each trial's
run (``trial_*/results.json``, ``config.yaml``, ``tensorboard/`` with the HParams plugin),
``search.json`` (what is searched), ``best.json`` and ``best_config.yaml`` (ready for
``python -m gcl_tf.train``, evaluating on the test split).
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import contextlib
import copy
import functools
import itertools
import json
import math
import shutil
import sys
import time

from gcl_tf import config as config_lib
from gcl_tf import train as train_lib
from gcl_tf.errors import ConfigError, Stopped, TrainingError, UserError, exit_on_user_error
from gcl_tf.faults import entries, exclusive
from gcl_tf.io import read_json, write_atomic, write_json_atomic
from gcl_tf.quiet import import_tensorflow

OBJECTIVE = "val_acc"  # the trial's ACC (percent) on the validation splits; maximised
SEARCH_FILE = "search.json"
BEST_CONFIG = "best_config.yaml"
BEST_FILE = "best.json"
DEFAULT_RANDOM_TRIALS = 10  # KerasTuner's own default for random and bayesian search

_OPTIMIZERS = ["adam", "sgd"]
_LEARNING_RATES = [0.0002, 0.001, 0.01, 0.1, 0.3, 1.0]

# The GCL paper's appendix "Hyper-parameters" grids (after GEM's), keyed by config keys.
# A-GEM and iCaRL have no grid in the appendix: they get the optimizer and learning-rate grid.
PAPER_GRIDS = {
    "finetune": {"train.optimizer": _OPTIMIZERS, "train.learning_rate": _LEARNING_RATES},
    "er": {"train.optimizer": _OPTIMIZERS, "train.learning_rate": _LEARNING_RATES},
    "ewc": {"train.optimizer": _OPTIMIZERS, "train.learning_rate": _LEARNING_RATES,
            "method.ewc_lambda": [0.1, 1.0, 10.0, 100.0, 1000.0]},  # "regularization"
    "gem": {"train.optimizer": _OPTIMIZERS, "train.learning_rate": _LEARNING_RATES,
            "method.margin": [0.0, 0.1, 0.5, 1.0]},
    "agem": {"train.optimizer": _OPTIMIZERS, "train.learning_rate": _LEARNING_RATES},
    "mer": {"train.optimizer": ["sgd"], "train.learning_rate": _LEARNING_RATES,
            "method.beta": [0.01, 0.03, 0.1, 0.3, 1.0]},  # within-batch meta-learning rate
    "icarl": {"train.optimizer": _OPTIMIZERS, "train.learning_rate": _LEARNING_RATES},
    "gcl": {"train.optimizer": _OPTIMIZERS, "train.learning_rate": _LEARNING_RATES,
            "method.graph_lambda": [0.0, 10.0, 50.0, 100.0, 1000.0, 5000.0],  # graph regularization
            "method.context_temperature": [0.1, 0.3, 1.0, 5.0, 10.0],
            "method.target_temperature": [0.1, 0.3, 1.0, 5.0, 10.0]},
}


def paper_grid(method: str) -> dict:
    if method not in PAPER_GRIDS:
        raise ConfigError(f"tune.space: no default grid for method {method}; give tune.space in the config")
    return copy.deepcopy(PAPER_GRIDS[method])


# ----------------------------------------------------------------------------- what is searched
def _set_text(key: str, value) -> str:
    """A ``--set`` override for ``value`` (JSON is valid YAML; the config reads numbers back exactly)."""
    return f"{key}={json.dumps(value)}"


def _plain(obj):
    """JSON round trip: the form in which configs are stored and compared."""
    return json.loads(json.dumps(obj))


def format_values(values: dict) -> str:
    return "  ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


class Search:
    """A search: the config file (+ ``--set``), its space, the tuner and the output folder."""

    def __init__(self, raw: dict, overrides=(), tuner=None, max_trials=None, output_dir=None, trial_verbose=0):
        self.raw = copy.deepcopy(raw)
        self.trial_verbose = trial_verbose  # Keras progress inside each trial (0: only a line per trial)
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
            space, where = paper_grid(self.method), f"default grid of {self.method}"
        else:
            space, where = base.tune.space, "tune.space"
        self.space = config_lib.search_space(base, space, self.tuner, where=where)
        self.paper_grid = base.tune.space is None
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
        self.validation_fraction = (base.tune.validation_fraction if self.added_validation
                                    else base.benchmark.validation_fraction)
        self.output_dir = output_dir or f"{base.output_dir.rstrip('/')}-tune"
        self.base = self.trial_config({})  # checks the forced settings once
        self._benchmark = (None, None)

    @classmethod
    def from_file(cls, path, overrides=(), **kwargs):
        return cls(config_lib.load_yaml(path), overrides, **kwargs)

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
        config = _plain(self.base.to_dict())
        config.pop("output_dir")
        config["train"].pop("verbose")
        return _plain({"tuner": self.tuner, "space": self.space, "config": config})


# ----------------------------------------------------------------------------- KerasTuner parts
def _keras_tuner():
    import keras_tuner

    return keras_tuner


@functools.lru_cache(maxsize=None)
def _make_classes():
    """KerasTuner subclasses (built on first use: importing keras_tuner imports TensorFlow)."""
    kt = _keras_tuner()
    from keras_tuner.src.engine.hyperparameters import hp_types

    class _AbortSearch(kt.errors.FatalError, UserError):
        """A user mistake met inside a trial (missing data, ...): stops the search with one line."""

    TrialStatus = kt.engine.trial.TrialStatus

    class EndedTrialsStayEnded:
        """Oracle mixin: a reloaded search does not hand out again a trial that had ended.

        ``Oracle.end_trial`` saves the oracle while the ending trial is still among the ongoing
        ones; a single process saves again right after, but the chief of a distributed search
        does not, so its reloaded oracle would retry the trial that ended last. A trial whose own
        ``trial.json`` says COMPLETED or FAILED is left out of the retry queue.
        """

        def reload(self):
            super().reload()
            ended = (TrialStatus.COMPLETED, TrialStatus.FAILED)
            self._retry_queue = [t for t in self._retry_queue if self.trials[t].status not in ended]

    class RandomOracle(EndedTrialsStayEnded, kt.oracles.RandomSearchOracle):
        """KerasTuner's random search."""

    class BayesianOracle(EndedTrialsStayEnded, kt.oracles.BayesianOptimizationOracle):
        """KerasTuner's Bayesian optimisation (Gaussian process)."""

    class GridOracle(EndedTrialsStayEnded, kt.oracles.GridSearchOracle):
        """KerasTuner's grid search over a fixed space of choices: same order (the first value of
        each key first, the last key varying fastest), every combination once.

        KerasTuner 1.4.8's GridSearchOracle finds the next combination from in-memory bookkeeping
        that it neither saves nor rebuilds, so a reloaded search stops at once (or fails with a
        KeyError, keras-team/keras-tuner#1055), and with several workers it hands out one new
        trial per finished trial, leaving the other workers polling. Here the next combination is
        the first one the oracle has not tried yet (its saved ``_tried_so_far``): the search
        resumes where it stopped and every free worker gets a trial. Spaces with ranges or
        conditions keep KerasTuner's own algorithm.
        """

        def _static_choices(self):
            lists = {}
            for hp in self.get_space().space:
                if hp.conditions or not isinstance(hp, hp_types.Choice):
                    return None
                lists[hp.name] = [hp.default] + [v for v in hp.values if v != hp.default]
            return lists

        def populate_space(self, trial_id):
            lists = self._static_choices()
            if lists is None:
                return super().populate_space(trial_id)
            names = list(lists)
            for combination in itertools.product(*(lists[n] for n in names)):
                values = dict(zip(names, combination))
                if not self._duplicate(values):
                    return {"status": TrialStatus.RUNNING, "values": values}
            return {"status": TrialStatus.STOPPED, "values": None}

    from keras_tuner.src.engine.oracle import Display

    class ChiefDisplay(Display):
        """The chief's view of a distributed search: a line per trial handed out and per trial
        finished (KerasTuner's own display prints a table per trial; its saved state is kept)."""

        def __init__(self, oracle, plan):
            super().__init__(oracle, verbose=1)
            self.plan = plan

        def _values(self, trial):
            return format_values({k: trial.hyperparameters.values.get(k) for k in self.plan.space})

        def on_trial_begin(self, trial):
            worker = next((t for t, o in self.oracle.ongoing_trials.items() if o.trial_id == trial.trial_id), "?")
            print(f"[chief] trial {trial.trial_id} -> {worker}: {self._values(trial)}", flush=True)

        def on_trial_end(self, trial):
            if trial.status == "COMPLETED" and trial.score is not None:
                outcome = f"validation ACC {trial.score:.2f}"
            else:
                outcome = trial.status
            best = self.oracle.get_best_trials(1)
            best_text = ""
            if best and best[0].score is not None:
                best_text = f"  [best so far: {best[0].score:.2f}, trial {best[0].trial_id}]"
            print(f"[chief] trial {trial.trial_id}: {self._values(trial)} -> {outcome}{best_text}", flush=True)

    class ContinualHyperModel(kt.HyperModel):
        """``build(hp)`` declares the space and returns the trial's config; ``fit`` trains it."""

        def __init__(self, search: Search):
            super().__init__(name="gcl_tf")
            self.plan = search

        def declare(self, hp):
            values = {}
            for key, spec in self.plan.space.items():
                if isinstance(spec, list):
                    values[key] = hp.Choice(key, spec)
                else:
                    sampling = "log" if spec["log"] else "linear"
                    if isinstance(spec["min"], int):
                        values[key] = hp.Int(key, spec["min"], spec["max"], step=spec["step"], sampling=sampling)
                    else:
                        values[key] = hp.Float(key, spec["min"], spec["max"], step=spec["step"], sampling=sampling)
            return values

        def build(self, hp):
            return self.plan.trial_config(self.declare(hp))

        def fit(self, hp, config, output_dir=None, trial_id=None, **kwargs):
            import keras

            from gcl_tf.checkpoint import can_resume

            values = {k: hp.values[k] for k in self.plan.space}
            config.output_dir = output_dir
            results = _finished_run(output_dir, config)
            if results is None:
                keras.backend.clear_session()
                resume = can_resume(output_dir, config)  # a trial stopped by a signal goes on
                try:
                    results = train_lib.run(config, output_dir, overwrite=not resume, verbose=self.plan.trial_verbose,
                                            benchmark=self.plan.benchmark_for(config), resume=resume)
                except TrainingError as error:  # a diverging run: the worst score, the search goes on
                    print(f"  trial {trial_id}: {' '.join(str(error).split())} (scored 0)", flush=True)
                    results = {"acc": 0.0, "fgt": float("nan"), "bwt": float("nan"), "num_tasks": 0}
                except UserError as error:
                    raise _AbortSearch(str(error)) from None
            metrics = {OBJECTIVE: float(results["acc"])}
            for name in ("fgt", "bwt"):
                if name in results and results[name] is not None and math.isfinite(results[name]):
                    metrics[f"val_{name}"] = float(results[name])
            _log_hparams(os.path.join(output_dir, "tensorboard"), values, metrics, trial_id,
                         step=len(results.get("accuracy_matrix", [])))
            return metrics

    class ContinualTuner(kt.Tuner):
        """A KerasTuner ``Tuner`` whose trial is one continual run (``run_trial`` returns its metrics)."""

        def __init__(self, search: Search, oracle, **kwargs):
            self.plan = search
            super().__init__(oracle=oracle, hypermodel=ContinualHyperModel(search), **kwargs)
            self.trials_run = []
            self._started = {}
            self._metrics = {}
            self._checked = False

        def run_trial(self, trial, *args, **kwargs):
            if not self._checked:
                _check_same_search(self.plan)
                self._checked = True
            hp = trial.hyperparameters
            config = self.hypermodel.build(hp)
            folder = self.get_trial_dir(trial.trial_id)
            metrics = self.hypermodel.fit(hp, config, output_dir=folder, trial_id=trial.trial_id)
            self._metrics[trial.trial_id] = metrics
            return metrics

        def on_trial_begin(self, trial):
            super().on_trial_begin(trial)
            self._started[trial.trial_id] = time.perf_counter()
            values = {k: trial.hyperparameters.values.get(k) for k in self.plan.space}
            print(f"[{self.tuner_id}] trial {trial.trial_id} started: {format_values(values)}", flush=True)

        def on_trial_end(self, trial):
            super().on_trial_end(trial)
            self.trials_run.append(trial.trial_id)
            seconds = time.perf_counter() - self._started.pop(trial.trial_id, time.perf_counter())
            values = {k: trial.hyperparameters.values.get(k) for k in self.plan.space}
            metrics = self._metrics.pop(trial.trial_id, None)
            if metrics is not None and trial.status == "COMPLETED":
                outcome = f"validation ACC {metrics[OBJECTIVE]:.2f}"
                if "val_fgt" in metrics:
                    outcome += f"  FGT {metrics['val_fgt']:.2f}"
            else:
                message = (trial.message or "").strip().splitlines()
                outcome = f"{trial.status}" + (f" ({message[-1]})" if message else "")
            best = self.oracle.get_best_trials(1)
            best_text = ""
            if best and best[0].score is not None:
                best_text = f"  [best so far: {best[0].score:.2f}, trial {best[0].trial_id}]"
            print(f"[{self.tuner_id}] trial {trial.trial_id}: {format_values(values)} -> {outcome}"
                  f"  ({seconds:.1f}s){best_text}", flush=True)

    oracles = {"grid": GridOracle, "random": RandomOracle, "bayesian": BayesianOracle}
    return oracles, ContinualTuner, ChiefDisplay


def _finished_run(folder: str, config) -> dict | None:
    """The results of a run already finished in ``folder`` with this exact config (a trial
    interrupted after its run ended is not trained again), else None."""
    path = os.path.join(folder, train_lib.RESULTS)
    if not os.path.exists(path):
        return None
    try:
        results = read_json(path)
    except (OSError, ValueError):
        return None
    if results.get("config") == _plain(config.to_dict()) and results.get("eval_split") == "validation":
        return results
    return None


def _hparams_domain(spec):
    from tensorboard.plugins.hparams import api as hp_api

    if isinstance(spec, list):
        values = [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in spec]
        return hp_api.Discrete(values)
    if isinstance(spec["min"], int):
        return hp_api.IntInterval(spec["min"], spec["max"])
    return hp_api.RealInterval(float(spec["min"]), float(spec["max"]))


_HPARAMS_METRICS = (("tune/val_acc", "validation ACC"), ("tune/val_fgt", "validation FGT"))


def _log_hparams(logdir: str, values: dict, metrics: dict, trial_id, step: int) -> None:
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


def _log_hparams_config(search: Search) -> None:
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


# ----------------------------------------------------------------------------- roles and folders
def role() -> str:
    """``single``, ``chief`` or ``worker``, from KerasTuner's own environment variables."""
    from keras_tuner.src.distribute import utils as dist_utils

    try:
        if not dist_utils.has_chief_oracle():
            return "single"
    except RuntimeError as error:  # KERASTUNER_ORACLE_IP without the port or the tuner id
        raise UserError(" ".join(str(error).split())) from None
    return "chief" if dist_utils.is_chief_oracle() else "worker"


def _check_output(search: Search, overwrite: bool, who: str) -> None:
    folder = search.output_dir
    if who == "worker" or not os.path.isdir(folder) or not entries(folder):
        return
    if not os.path.exists(os.path.join(folder, SEARCH_FILE)):
        raise UserError(f"{folder} exists and holds no search ({SEARCH_FILE} is missing); choose another --output")
    if not overwrite:
        _check_same_search(search)


def _check_same_search(search: Search) -> None:
    """A resumed search (or a worker) must search what the saved search searches."""
    path = os.path.join(search.output_dir, SEARCH_FILE)
    if not os.path.exists(path):
        return
    try:
        saved = read_json(path)
    except (OSError, ValueError):
        raise UserError(f"{path} is not valid JSON; pass --overwrite to start the search again") from None
    mine = search.description()
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


def make_oracle(search: Search, seed: int):
    kt = _keras_tuner()
    oracles, _, _ = _make_classes()
    objective = kt.Objective(OBJECTIVE, direction="max")
    return oracles[search.tuner](objective=objective, max_trials=search.max_trials, seed=seed)


# ----------------------------------------------------------------------------- the search
def run_search(search: Search, overwrite: bool = False) -> dict:
    """Run (or resume, or join as a worker) a search; returns a summary (``best`` on the chief).

    The chief (or a single process) holds the folder's lock (gcl_tf.faults.exclusive) for the
    whole search; workers join the chief's folder."""
    import_tensorflow()
    who = role()
    _check_output(search, overwrite, who)
    if who == "worker" and overwrite:
        print(f"[{os.environ['KERASTUNER_TUNER_ID']}] --overwrite is left to the chief", flush=True)
        overwrite = False
    if who != "chief":  # the data, now: a missing or corrupt file stops here, before DIR is touched
        search.benchmark_for(search.base)
    folder = os.path.abspath(search.output_dir)
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    with exclusive(folder) if who != "worker" else contextlib.nullcontext():
        _check_output(search, overwrite, who)  # again, now that no other search can change the folder
        if overwrite:  # here, not by KerasTuner: its overwrite deletes the folder with the lock file
            _clear(folder)
        return _search(search, folder, who)


def _clear(folder: str) -> None:
    """Delete what ``folder`` holds but its lock file."""
    for name in entries(folder):
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def _search(search: Search, folder: str, who: str) -> dict:
    _, ContinualTuner, ChiefDisplay = _make_classes()
    # KerasTuner's oracle seed 0 means "random": shift the config's seed into 1 .. 2**31 - 1.
    oracle = make_oracle(search, seed=search.base.seed % (2**31 - 1) + 1)
    if who == "chief":  # the oracle's display is the chief's only view of the trials
        oracle._display = ChiefDisplay(oracle, search)
    else:  # the tuner prints a line per trial it runs
        oracle.verbose = 0
    tuner = ContinualTuner(search, oracle, directory=os.path.dirname(folder),
                           project_name=os.path.basename(folder), overwrite=False)
    fresh = not os.path.exists(os.path.join(folder, SEARCH_FILE))
    if who != "worker":
        write_json_atomic(os.path.join(folder, SEARCH_FILE), search.description())
        if fresh:
            _log_hparams_config(search)
    _announce(search, who, fresh)

    tuner.search()

    if who == "worker":
        ran = ", ".join(tuner.trials_run) or "none"
        print(f"[{tuner.tuner_id}] done: ran trials {ran}; the chief reports the best", flush=True)
        return {"role": who, "trials_run": list(tuner.trials_run)}
    return report(search, tuner.oracle, who)


def _announce(search: Search, who: str, fresh: bool) -> None:
    space = "the paper's grid for " + search.method if search.paper_grid else "tune.space"
    size = f"{search.grid_size} combinations" if all(isinstance(v, list) for v in search.space.values()) else "ranges"
    head = {"single": "Search", "chief": "Chief of a distributed search",
            "worker": "Worker of a distributed search"}[who]
    verb = "joins" if who == "worker" else "starts" if fresh else "resumes"
    print(f"{head} {verb}: {search.tuner} tuner, {space} ({size}), at most {search.max_trials} trials, "
          f"objective ACC on validation -> {search.output_dir}", flush=True)
    for key, spec in search.space.items():
        print(f"  {key}: {spec}", flush=True)
    if search.added_validation:
        print(f"  benchmark.validation_fraction is 0: each task holds out {search.validation_fraction:g} of its "
              f"training samples for validation (tune.validation_fraction); the test split is not read", flush=True)
    if who == "chief":
        print(f"  serving the oracle on {os.environ['KERASTUNER_ORACLE_IP']}:{os.environ['KERASTUNER_ORACLE_PORT']}; "
              f"start workers with the same command and KERASTUNER_TUNER_ID=tuner0, tuner1, ...", flush=True)
    elif who == "worker":
        print(f"  worker {os.environ['KERASTUNER_TUNER_ID']} asks the chief at "
              f"{os.environ['KERASTUNER_ORACLE_IP']}:{os.environ['KERASTUNER_ORACLE_PORT']} for trials", flush=True)


def report(search: Search, oracle, who: str = "single") -> dict:
    """Print the finished trials and the best one; write ``best.json`` and ``best_config.yaml``."""
    trials = [t for t in oracle.trials.values() if t.status == "COMPLETED" and t.score is not None]
    others = len(oracle.trials) - len(trials)
    if not trials:
        raise UserError(f"no trial of the search in {search.output_dir} finished; "
                        f"see the messages in its trial_*/trial.json")
    trials.sort(key=lambda t: (-t.score, t.trial_id))
    print(f"\n{len(trials)} trials finished" + (f" ({others} failed or unfinished)" if others else "")
          + "; validation ACC, best first:")
    for t in trials[:10]:
        values = {k: t.hyperparameters.values.get(k) for k in search.space}
        print(f"  trial {t.trial_id}  {t.score:6.2f}  {format_values(values)}")
    best = trials[0]
    values = {k: best.hyperparameters.values.get(k) for k in search.space}
    config = search.best_config(values)
    path = os.path.join(search.output_dir, BEST_CONFIG)
    command = f"python -m gcl_tf.train --config {path}"
    header = (f"# Best of {len(trials)} trials ({search.tuner} search in {search.output_dir}): trial {best.trial_id},\n"
              f"# ACC {best.score:.2f} on validation splits "
              f"({search.validation_fraction:g} of each task's training data).\n"
              f"# Searched: {format_values(values)}\n"
              f"# Train it and measure test accuracy: {command}\n")
    write_atomic(path, header + config_lib.config_to_yaml(config))
    summary = {
        "trial_id": best.trial_id,
        OBJECTIVE: float(best.score),
        "values": values,
        "tuner": search.tuner,
        "trials_finished": len(trials),
        "best_config": path,
        "trials": [{"trial_id": t.trial_id, OBJECTIVE: float(t.score),
                    "values": {k: t.hyperparameters.values.get(k) for k in search.space}} for t in trials],
    }
    write_json_atomic(os.path.join(search.output_dir, BEST_FILE), summary)
    print(f"\nBest: trial {best.trial_id}, validation ACC {best.score:.2f}")
    for key, value in values.items():
        print(f"  {key}: {value}")
    print(f"Ready-to-run config (evaluates on test): {path}\n  {command}", flush=True)
    return {"role": who, **summary}


def search(config=None, overrides=(), tuner=None, max_trials=None, output_dir=None, overwrite=False,
           raw=None, verbose=0) -> dict:
    """Python entry point: ``config`` is a YAML path (or pass ``raw``, a mapping)."""
    kwargs = dict(tuner=tuner, max_trials=max_trials, output_dir=output_dir, trial_verbose=verbose)
    if raw is None:
        s = Search.from_file(config, overrides, **kwargs)
    else:
        s = Search(raw, overrides, **kwargs)
    return run_search(s, overwrite=overwrite)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gcl_tf.tune",
                                     description="Hyper-parameter search with KerasTuner.",
                                     epilog="Distributed: run the same command with KERASTUNER_TUNER_ID=chief "
                                            "(one process) or tuner0, tuner1, ... (workers), and "
                                            "KERASTUNER_ORACLE_IP / KERASTUNER_ORACLE_PORT of the chief.")
    parser.add_argument("--config", required=True, help="YAML config file (see configs/); its tune section")
    parser.add_argument("--tuner", choices=["grid", "random", "bayesian"],
                        help="KerasTuner oracle (default: the config's tune.tuner, grid)")
    parser.add_argument("--max-trials", type=int, metavar="N",
                        help="trials at most (default: the whole grid; 10 for random and bayesian)")
    parser.add_argument("--output", help="search folder (default: the config's output_dir + '-tune')")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set benchmark.num_tasks=5 (repeatable)")
    parser.add_argument("--overwrite", action="store_true",
                        help="delete the search folder and start again (default: resume it)")
    parser.add_argument("--verbose", type=int, choices=[0, 1, 2], default=0,
                        help="progress inside each trial as in gcl_tf.train (default 0: a line per trial)")
    return parser


@exit_on_user_error
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.max_trials is not None and args.max_trials < 1:
        raise UserError(f"--max-trials: {args.max_trials} is out of range; allowed: 1 or more")
    import_tensorflow()  # first, so a config error is the only line on stderr
    try:
        search(args.config, args.overrides, tuner=args.tuner, max_trials=args.max_trials,
               output_dir=args.output, overwrite=args.overwrite, verbose=args.verbose)
    except Stopped as stop:  # SIGTERM or Ctrl-C during a trial's training
        raise stop.with_hint("run the same command again (without --overwrite) to resume the search") from None
    except KeyboardInterrupt:
        print("\ninterrupted: run the same command again (without --overwrite) to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
