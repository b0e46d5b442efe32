"""The KerasTuner parts of a search: oracles that resume exactly, the chief's display, the
hypermodel whose trial is one continual run, and the tuner. Importing this module imports
KerasTuner (and TensorFlow): :mod:`gcl_tf.tune` imports it when a search starts."""
from __future__ import annotations

import itertools
import math
import os
import sys
import time

import keras_tuner as kt
from keras_tuner.src.engine.hyperparameters import hp_types
from keras_tuner.src.engine.oracle import Display

from gcl_tf import train as train_lib
from gcl_tf.errors import TrainingError, UserError
from gcl_tf.run_layout import TENSORBOARD
from gcl_tf.tune.search import (
    OBJECTIVE,
    Search,
    can_resume,
    check_same_search,
    finished_run,
    format_values,
    log_hparams,
)

TrialStatus = kt.engine.trial.TrialStatus


class AbortSearch(kt.errors.FatalError, UserError):
    """A user mistake met inside a trial (missing data, ...): stops the search with one line."""


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

        values = {k: hp.values[k] for k in self.plan.space}
        config.output_dir = output_dir
        results = finished_run(output_dir, config)
        if results is None:
            keras.backend.clear_session()
            resume = can_resume(output_dir, config)  # a trial stopped by a signal goes on
            try:
                # In a log file a trial shows a progress line about once a minute, whatever its verbosity.
                progress = None if sys.stdout.isatty() else train_lib.PROGRESS_SECONDS
                results = train_lib.run(config, output_dir, overwrite=not resume, verbose=self.plan.trial_verbose,
                                        benchmark=self.plan.benchmark_for(config), resume=resume,
                                        progress_seconds=progress)
            except TrainingError as error:  # a diverging run: the worst score, the search goes on
                print(f"  trial {trial_id}: {' '.join(str(error).split())} (scored 0)", flush=True)
                results = {"acc": 0.0, "fgt": float("nan"), "bwt": float("nan"), "num_tasks": 0}
            except UserError as error:
                raise AbortSearch(str(error)) from None
        metrics = {OBJECTIVE: float(results["acc"])}
        for name in ("fgt", "bwt"):
            if name in results and results[name] is not None and math.isfinite(results[name]):
                metrics[f"val_{name}"] = float(results[name])
        log_hparams(os.path.join(output_dir, TENSORBOARD), values, metrics, trial_id,
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
            check_same_search(self.plan)
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


ORACLES = {"grid": GridOracle, "random": RandomOracle, "bayesian": BayesianOracle}
