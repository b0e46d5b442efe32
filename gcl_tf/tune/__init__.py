"""Hyper-parameter search with KerasTuner: ``python -m gcl_tf.tune --config FILE --tuner grid|random|bayesian``.

One trial is one whole continual run (:func:`gcl_tf.train.run`) of the config with the trial's
values applied as ``--set`` overrides, scored by its ACC on validation splits carved from each
task's training data (``eval.split: validation``); the test split is never read. The space is
the config's ``tune.space``, or the chosen method's default grid (:func:`default_grid`: the GCL
paper's appendix grid, the optimizer and learning rate plus the keys the method's class declares).

KerasTuner does the searching: its oracles pick the trials, an interrupted search resumes from
``DIR`` (finished trials are not run again) and a chief with workers share one search when
``KERASTUNER_TUNER_ID``, ``KERASTUNER_ORACLE_IP`` and ``KERASTUNER_ORACLE_PORT`` are set.
Writes, under ``DIR``: KerasTuner's state (``oracle.json``, ``trial_*/trial.json``), each trial's
run (``trial_*/results.json``, ``config.yaml``, ``tensorboard/`` with the HParams plugin),
``search.json`` (what is searched), ``best.json`` and ``best_config.yaml`` (ready for
``python -m gcl_tf.train``, evaluating on the test split).

The package: :mod:`.space` (the default grids, the check of a space), :mod:`.search` (a search's
plan and its trials' records), :mod:`.tuners` (the KerasTuner subclasses, imported when a search
starts) and this module (running a search, its report, the command line).
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import contextlib
import shutil
import sys

from gcl_tf import config as config_lib
from gcl_tf.errors import Stopped, UserError, exit_on_user_error
from gcl_tf.faults import entries, exclusive
from gcl_tf.io import write_atomic, write_json_atomic
from gcl_tf.quiet import import_tensorflow
from gcl_tf.run_layout import BEST_CONFIG, BEST_FILE, SEARCH_FILE
from gcl_tf.tune import local
from gcl_tf.tune.search import (
    DEFAULT_RANDOM_TRIALS,
    OBJECTIVE,
    Search,
    check_same_search,
    default_output,
    format_values,
    log_hparams_config,
)
from gcl_tf.tune.space import COMMON_GRID, default_grid, precheck_space, search_space, tunable_keys

# The package's API: the searching here, the plan and the spaces from its modules.
__all__ = ["BEST_CONFIG", "BEST_FILE", "COMMON_GRID", "DEFAULT_RANDOM_TRIALS", "OBJECTIVE", "SEARCH_FILE", "Search",
           "build_parser", "default_grid", "main", "make_oracle", "report", "role", "run_search", "search",
           "search_space", "tunable_keys"]


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
        check_same_search(search)
    else:  # only a search's own files (the command line said so before TensorFlow loaded)
        from gcl_tf.overwrite import check_replaceable
        from gcl_tf.prechecks import SEARCH
        from gcl_tf.run_layout import SEARCH_NAMES

        check_replaceable(folder, "--output", SEARCH, SEARCH_NAMES, (SEARCH_FILE,))


def make_oracle(search: Search, seed: int):
    import keras_tuner as kt

    from gcl_tf.tune.tuners import ORACLES

    objective = kt.Objective(OBJECTIVE, direction="max")
    extra = {"num_initial_points": search.initial_points} if search.tuner == "bayesian" else {}
    return ORACLES[search.tuner](objective=objective, max_trials=search.max_trials, seed=seed, **extra)


# ----------------------------------------------------------------------------- the search
def run_search(search: Search, overwrite: bool = False, on_ready=None) -> dict:
    """Run (or resume, or join as a worker) a search; returns a summary (``best`` on the chief).

    The chief (or a single process) holds the folder's lock (gcl_tf.faults.exclusive) for the
    whole search; workers join the chief's folder. ``on_ready()`` is called once the folder is
    checked (and cleared for ``overwrite``), before the search starts: a local chief starts its
    workers there (:mod:`.local`)."""
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
        if on_ready is not None:
            on_ready()
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
    from gcl_tf.tune.tuners import (  # imports KerasTuner and TensorFlow
        ChiefDisplay,
        ContinualTuner,
    )

    # KerasTuner's oracle seed 0 means "random": shift the config's seed into 1 .. 2**31 - 1.
    oracle = make_oracle(search, seed=search.base.seed % (2**31 - 1) + 1)
    if who == "chief" and not search.local_workers:  # the oracle's display: the chief's only view of the trials
        oracle._display = ChiefDisplay(oracle, search)
    else:  # the tuner prints a line per trial it runs (local workers print to this terminal)
        oracle.verbose = 0
    tuner = ContinualTuner(search, oracle, directory=os.path.dirname(folder),
                           project_name=os.path.basename(folder), overwrite=False)
    fresh = not os.path.exists(os.path.join(folder, SEARCH_FILE))
    if who != "worker":
        write_json_atomic(os.path.join(folder, SEARCH_FILE), search.description())
        if fresh:
            log_hparams_config(search)
    _announce(search, who, fresh)

    tuner.search()

    if who == "worker":
        ran = ", ".join(tuner.trials_run) or "none"
        print(f"[{tuner.tuner_id}] done: ran trials {ran}; the chief reports the best", flush=True)
        return {"role": who, "trials_run": list(tuner.trials_run)}
    return report(search, tuner.oracle, who)


def _announce(search: Search, who: str, fresh: bool) -> None:
    if who == "worker":  # the chief prints the space; a worker, where it gets its trials
        print(f"[{os.environ['KERASTUNER_TUNER_ID']}] joins the search in {search.output_dir}: asks the chief at "
              f"{os.environ['KERASTUNER_ORACLE_IP']}:{os.environ['KERASTUNER_ORACLE_PORT']} for trials", flush=True)
        return
    space = "the default grid of " + search.method if search.default_space else "tune.space"
    size = f"{search.grid_size} combinations" if all(isinstance(v, list) for v in search.space.values()) else "ranges"
    head = ("Local search" if search.local_workers else
            {"single": "Search", "chief": "Chief of a distributed search"}[who])
    print(f"{head} {'starts' if fresh else 'resumes'}: {search.tuner} tuner, {space} ({size}), at most "
          f"{search.max_trials} trials, objective ACC on validation -> {search.output_dir}", flush=True)
    for key, spec in search.space.items():
        print(f"  {key}: {spec}", flush=True)
    if search.tuner == "bayesian":
        print(f"  the first {search.initial_points} trials at random (tune.initial_points), then the Gaussian "
              f"process's picks", flush=True)
    if search.added_validation:
        print(f"  benchmark.validation_fraction is 0: each task holds out {search.validation_fraction:g} of its "
              f"training samples for validation (tune.validation_fraction); the test split is not read", flush=True)
    if search.local_workers:
        threads = local.threads_per_worker(search.local_workers)
        print(f"  {search.local_workers} worker processes on this machine, {threads} intra-op "
              f"thread{'s' if threads > 1 else ''} each", flush=True)
    elif who == "chief":
        print(f"  serving the oracle on {os.environ['KERASTUNER_ORACLE_IP']}:{os.environ['KERASTUNER_ORACLE_PORT']}; "
              f"start workers with the same command and KERASTUNER_TUNER_ID=tuner0, tuner1, ...", flush=True)


SHOWN_TRIALS = 10  # trials listed by the report, best first (best.json holds every finished one)


def report(search: Search, oracle, who: str = "single") -> dict:
    """Print the finished trials and the best one; write ``best.json`` and ``best_config.yaml``."""
    trials = [t for t in oracle.trials.values() if t.status == "COMPLETED" and t.score is not None]
    others = len(oracle.trials) - len(trials)
    if not trials:
        raise UserError(f"no trial of the search in {search.output_dir} finished; "
                        f"see the messages in its trial_*/trial.json")
    trials.sort(key=lambda t: (-t.score, t.trial_id))
    shown = trials[:SHOWN_TRIALS]
    which = (f"the best {len(shown)} of {len(trials)} (all in {os.path.join(search.output_dir, BEST_FILE)})"
             if len(shown) < len(trials) else "best first")
    print(f"\n{len(trials)} {'trial' if len(trials) == 1 else 'trials'} finished"
          + (f" ({others} failed or unfinished)" if others else "") + f"; validation ACC, {which}:")
    for t in shown:
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
                                     epilog="On one machine: --workers N. "
                                            "On several: run the same command with KERASTUNER_TUNER_ID=chief "
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
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="run the trials in N processes on this machine, sharing its cores (default 1; "
                             "this process serves them as the chief of a distributed search)")
    return parser


def precheck(args) -> None:
    """What the command line checks before TensorFlow loads: the config and its ``--set`` (the
    method's own keys by name), ``tune.space`` (gcl_tf.tune.space.precheck_space) and the search
    folder (a worker's is its chief's, held by it)."""
    from gcl_tf.prechecks import given_output, search_folder

    config = config_lib.precheck(args.config, args.overrides)
    precheck_space(config, args.tuner or config.tune.tuner)
    if os.environ.get("KERASTUNER_TUNER_ID", "chief") == "chief":
        search_folder(given_output(args.output) or default_output(config), config, args.overwrite)


@exit_on_user_error
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.max_trials is not None and args.max_trials < 1:
        raise UserError(f"--max-trials: {args.max_trials} is out of range; allowed: 1 or more")
    if args.workers < 1:
        raise UserError(f"--workers: {args.workers} is out of range; allowed: 1 or more")
    local.check_alone(args.workers)
    precheck(args)  # before TensorFlow loads: reported in about a second
    import_tensorflow()  # quietly, before the methods' modules import it
    try:
        plan = Search.from_file(args.config, args.overrides, tuner=args.tuner, max_trials=args.max_trials,
                                output_dir=args.output, trial_verbose=args.verbose)
        if args.workers > 1:
            return local.run(args, plan, run_search)
        run_search(plan, overwrite=args.overwrite)
    except Stopped as stop:  # SIGTERM or Ctrl-C during a trial's training
        raise stop.with_hint("run the same command again (without --overwrite) to resume the search") from None
    except KeyboardInterrupt:
        print("\ninterrupted: run the same command again (without --overwrite) to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
