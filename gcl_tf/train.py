"""Train a method on a continual stream: ``python -m gcl_tf.train --config FILE [--set k=v ...]``.

Tasks are learned in order with ``model.fit`` (one online epoch by default); at the end of each
task every task is evaluated (a Keras callback), filling the accuracy matrix ``R[i][j]``.
Writes ``DIR/results.json`` (never overwritten without ``--overwrite``), ``DIR/config.yaml``,
``DIR/model.json`` (what ``gcl_tf.export`` needs besides the checkpoint), ``DIR/learner.keras``
(the learner saved whole, memory included: ``gcl_tf.load_model``), TensorBoard logs under
``DIR/tensorboard`` and checkpoints under ``DIR/checkpoints`` (every ``train.checkpoint_every``
steps and at every task end); ``--resume`` continues a killed run from its last checkpoint, and
a folder holding an unfinished run is refused without ``--resume`` or ``--overwrite``;
``--init-from RUN_DIR`` starts from a finished run's learner (gcl_tf/learner.py); the file names
are gcl_tf/run_layout.py's. One run at a time holds ``DIR`` (a lock, see gcl_tf/faults.py); SIGTERM or Ctrl-C saves a
checkpoint at the next step and stops (exit status 128 + the signal); docs/reliability.md.

Reading order: :func:`main` (last in the file) checks the config, the folder, the paths and the
data of a source read without TensorFlow (gcl_tf/prechecks.py) before TensorFlow loads, then calls
:func:`run`; :func:`train_model`, top to bottom, makes the strategy, holds the folder and checks it
(once, under its lock), loads the data, checks the memory (:func:`checked_inputs`), builds or
restores the model (:func:`build_training_state`) and lets :class:`gcl_tf.task_loop.TaskLoop` fit
the tasks in order and write the learner and results; the checks it calls are above it.
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import contextlib
import dataclasses
import json
import shlex
import shutil
import sys
import tempfile
import warnings
from typing import NamedTuple, Optional

from gcl_tf import config as config_lib
from gcl_tf import config_dicts, prechecks, run_layout
from gcl_tf.data import fingerprint
from gcl_tf.errors import NotResumable, Stopped, UserError, exit_on_user_error
from gcl_tf.faults import StopSignals, exclusive, undo_unsaved_run
from gcl_tf.io import write_atomic, write_json_atomic
from gcl_tf.learner import check_init_folder
from gcl_tf.quiet import import_tensorflow
from gcl_tf.run_layout import ARTIFACTS, CONFIG, LEARNER, MODEL_INFO, RESULT_NEUTRAL_KEYS, RESULTS

PROGRESS_SECONDS = 60.0  # a progress line about once a minute in a log file (train.run's progress_seconds)


# ----------------------------------------------------------------------------- before training
def check_output(output_dir: str, overwrite: bool, resume: bool = False) -> None:
    """Refuse to replace a finished run, or an unfinished one (its checkpoints) without ``--resume`` or
    ``--overwrite``, or to resume without a checkpoint. Nothing written and no TensorFlow: the command
    line checks this before TensorFlow loads (after :func:`gcl_tf.prechecks.train_folder`: the path can
    be a folder, no run holds it), :func:`train_model` under the folder's lock."""
    results = os.path.join(output_dir, RESULTS)
    if os.path.exists(results) and resume:
        raise UserError(f"--resume: {results} exists, the run is finished; nothing to resume")
    if os.path.exists(results) and not overwrite:
        raise UserError(f"{results} exists; pass --overwrite to replace it or choose another --output")
    if resume and not run_layout.checkpoint_steps(output_dir):
        raise NotResumable.no_checkpoint(output_dir)
    left = None if overwrite or resume else run_layout.unfinished_run(output_dir)
    if left:
        raise UserError(f"{output_dir} holds {left}; pass --resume to continue it, or --overwrite to start "
                        "again and delete it, or choose another --output")


def check_resumable(output_dir: str, config) -> list[str]:
    """The checkpoints ``--resume`` may continue from, newest first; a one-line
    :class:`NotResumable` when there is none or when ``config`` differs from the run's
    ``DIR/config.yaml`` in a key that changes results."""
    from gcl_tf.checkpoint import saved_checkpoints

    candidates = saved_checkpoints(output_dir)
    saved_path = os.path.join(output_dir, CONFIG)
    if not candidates:
        raise NotResumable.no_checkpoint(output_dir)
    if not os.path.isfile(saved_path):
        raise NotResumable(f"{saved_path} is missing, so the run's config cannot be checked",
                           "start a new run in another --output")
    try:
        saved = config_lib.load_saved_config(saved_path).to_dict()
    except UserError as error:
        raise NotResumable(f"the run's {saved_path} is not a valid config ({error})",
                           "start a new run in another --output") from None
    neutral = RESULT_NEUTRAL_KEYS + fingerprint.moved_run_data(output_dir, saved, config)  # its data, by content
    shown = config_dicts.describe_differences(saved, config.to_dict(), neutral)
    if shown:
        raise NotResumable(f"the config differs from the run's {saved_path}: {shown}",
                           "resume with the run's config or start a new run in another --output")
    return candidates


def check_init_from_folder(config, output_dir: Optional[str] = None) -> None:
    """init_from's folder holds a learner, before TensorFlow loads (gcl_tf.learner.check_init_from: the learner)."""
    if config.init_from is not None:
        check_init_folder(config.init_from, output_dir or config.output_dir)


def make_strategy(config, cls):
    """The configured tf.distribute strategy (None: one device), checked against the method and
    the batch sizes before anything is built."""
    from gcl_tf import distribute, methods

    if config.train.distribute == "none":
        return None
    if not cls.supports_distribution:
        raise UserError(
            f"train.distribute: method {config.method.name} does not run under a tf.distribute strategy; "
            f"allowed: none (or a method among {', '.join(methods.distributed_names())})"
        )
    strategy = distribute.make_strategy(config.train)
    distribute.check_batch(strategy, config.train.batch_size, "train.batch_size")
    distribute.check_batch(strategy, config.eval.batch_size, "eval.batch_size")
    cls.check_replicas(config, strategy.num_replicas_in_sync)
    return strategy


# ----------------------------------------------------------------------------- restore
def build_training_state(config, benchmark, output_dir: str, resume_from=None, init_from=None):
    """The compiled model and its checkpoints, restored from the newest of ``resume_from`` (the
    checkpoints to resume from, newest first) that restores, if given; else, with ``init_from``
    (:func:`gcl_tf.learner.check_init_from`'s answer), starting from that run's learner.

    Everything that creates variables happens here (a distribution strategy's scope goes around
    this call).
    """
    from gcl_tf import methods
    from gcl_tf.checkpoint import RunCheckpoints

    model = methods.build(config, benchmark.input_shape, benchmark.num_classes)  # under train.mixed_precision's policy
    model.compile_for_training(config.train)
    checkpoints = RunCheckpoints(model, benchmark.num_tasks, output_dir)
    if resume_from is not None:
        checkpoints.restore_newest(resume_from)
    elif init_from is not None:
        from gcl_tf.learner import start_from_learner

        offset = start_from_learner(model, init_from["learner"], config.train.learning_rate, benchmark.num_tasks)
        checkpoints.progress.task_offset.assign(offset)
        checkpoints.progress.first_step.assign(int(model.step_counter.numpy()))
    return model, checkpoints


def model_info(config, benchmark) -> dict:
    names = benchmark.source.class_names()
    return {
        "method": config.method.name,
        "input_shape": [int(d) for d in benchmark.input_shape],
        "num_classes": int(benchmark.num_classes),
        "class_names": [str(n) for n in names[: benchmark.num_classes]] if names else None,
        fingerprint.KEY: fingerprint.fingerprint(config.benchmark),  # its data by content (--resume elsewhere)
    }


def start_output(output_dir: str, config, benchmark) -> None:
    """A fresh run: replace what an earlier run left (its checkpoints, an overwritten results
    file), then write the config and the model description."""
    os.makedirs(output_dir, exist_ok=True)
    shutil.rmtree(run_layout.checkpoint_dir(output_dir), ignore_errors=True)
    for name in (RESULTS, ARTIFACTS, LEARNER):
        if os.path.exists(os.path.join(output_dir, name)):
            os.unlink(os.path.join(output_dir, name))
    write_atomic(os.path.join(output_dir, CONFIG), config_lib.config_to_yaml(config))
    write_json_atomic(os.path.join(output_dir, MODEL_INFO), model_info(config, benchmark))


# ----------------------------------------------------------------------------- a whole run
class TrainedModel(NamedTuple):
    """What :func:`train_model` returns: the results (as in ``results.json``) and the trained model."""

    results: dict
    model: object


def run(config, output_dir=None, overwrite: bool = False, verbose=None, benchmark=None, resume: bool = False,
        progress_seconds=None) -> dict:
    """Train and evaluate one configuration; returns (and writes) the results dictionary
    (:func:`train_model`, which reads top to bottom, also returns the trained model).

    ``resume``: continue from the last checkpoint in ``output_dir`` (the config must match the
    run's ``config.yaml``); a folder that holds an unfinished run needs ``resume`` or
    ``overwrite``. Bad input (config, data, a missing checkpoint, more memory than the device
    has) raises a UserError before anything in ``output_dir`` is written; another run holding
    ``output_dir`` a FolderBusy. SIGTERM or SIGINT during training saves a checkpoint at the
    next step and raises :class:`gcl_tf.errors.Stopped`. ``progress_seconds``: a progress line
    (step, steps/s, time left) about that often while a task trains; None: every
    PROGRESS_SECONDS when ``verbose`` and the output is not a terminal (a log file), else none.
    """
    return train_model(config, output_dir, overwrite, verbose, benchmark, resume, progress_seconds).results


def train_model(config, output_dir=None, overwrite: bool = False, verbose=None, benchmark=None, resume: bool = False,
                progress_seconds=None) -> TrainedModel:
    """:func:`run`, returning the trained model with the results: the strategy (which says where
    this process writes), then under the folder's lock the folder (checked once), the data, the
    memory estimate, the model (built or restored) and the tasks (:class:`gcl_tf.task_loop.TaskLoop`)."""
    import keras
    import tensorflow as tf

    from gcl_tf import distribute, methods
    from gcl_tf.task_loop import TaskLoop

    output_dir = output_dir or config.output_dir
    config = dataclasses.replace(config, output_dir=output_dir)  # the saved config.yaml names this run's folder
    verbose, progress_seconds = output_modes(config, verbose, progress_seconds)
    multi_worker = config.train.distribute == "multi_worker"
    if resume and multi_worker:
        raise UserError("--resume: not available with train.distribute: multi_worker; allowed: none, mirrored")
    with op_determinism_restored(), contextlib.ExitStack() as scratch:  # a deterministic run leaves it as it was
        if config.train.deterministic:
            tf.config.experimental.enable_op_determinism()
        keras.utils.set_random_seed(config.seed)
        cls = methods.method_class(config.method.name)
        strategy = make_strategy(config, cls)
        if strategy is not None and not distribute.is_chief(strategy):  # takes part in every step, writes elsewhere
            output_dir = scratch.enter_context(tempfile.TemporaryDirectory(prefix="gcl_tf-worker-"))
            config = dataclasses.replace(config, output_dir=output_dir)
            overwrite, resume, verbose, progress_seconds = True, False, 0, 0
        # One run at a time holds the folder, from before its data loads: the folder is checked once,
        # under the lock, so no other run changes it between the check and the writes; a run that fails
        # before its first checkpoint leaves nothing.
        with undo_unsaved_run(output_dir), exclusive(output_dir):
            resume_from = check_folder(output_dir, config, overwrite, resume)
            benchmark, init_from = checked_inputs(config, cls, benchmark, output_dir, resume)
            if strategy is not None:  # a distributed iterator reports its end as running out of data
                warnings.filterwarnings("ignore", message="Your input ran out of data", category=UserWarning)
            with StopSignals(enabled=not multi_worker) as stop:  # multi-worker: stops together or not at all
                with strategy.scope() if strategy is not None else contextlib.nullcontext():
                    model, checkpoints = build_training_state(config, benchmark, output_dir, resume_from, init_from)
                if resume_from is None:
                    start_output(output_dir, config, benchmark)
                results = TaskLoop(config, output_dir, benchmark, model, checkpoints, strategy, stop, verbose,
                                   progress_seconds, init_from).run()
    return TrainedModel(results, model)


def checked_inputs(config, cls, benchmark, output_dir: str, resume: bool) -> tuple:
    """The data (loaded unless given; every task has a batch) and ``init_from``'s learner
    (:func:`gcl_tf.learner.check_init_from`; None when resuming: the run restores its own checkpoint),
    then the memory estimate: all before anything is written."""
    from gcl_tf.data import ContinualBenchmark
    from gcl_tf.data.streams import task_steps_per_epoch
    from gcl_tf.resources import check_memory

    if benchmark is None:
        benchmark = ContinualBenchmark(config.benchmark, config.seed, load_test=config.eval.split == "test")
        for task in benchmark.tasks:
            task_steps_per_epoch(len(task.train_data), config.train.batch_size, task.index)
    init_from = None
    if config.init_from is not None and not resume:
        from gcl_tf.learner import check_init_from

        init_from = check_init_from(config, benchmark, output_dir)
    buffers = cls.memory_estimate(config, benchmark.input_shape, benchmark.num_classes)
    if buffers:
        check_memory(buffers, f"method.memory_size: {config.method.memory_size}", cls.memory_advice(config))
    return benchmark, init_from


def check_folder(output_dir: str, config, overwrite: bool, resume: bool):
    """The folder as the run needs it (:func:`check_output`) and, resuming, the checkpoints to
    resume from, newest first (:func:`check_resumable`; else None)."""
    check_output(output_dir, overwrite, resume)
    return check_resumable(output_dir, config) if resume else None


@contextlib.contextmanager
def op_determinism_restored():
    """TensorFlow's op determinism (process-wide; ``train.deterministic`` turns it on) as it was before,
    once the block ends: a later run in the same process (a notebook, a search's next trial) that is
    not deterministic is not made so, and keeps ``jit_compile: auto``'s choice."""
    from tensorflow.python.framework import config as tf_config  # (no public getter; Keras reads it)

    before = tf_config.is_op_determinism_enabled()
    try:
        yield
    finally:
        if tf_config.is_op_determinism_enabled() != before:
            (tf_config.enable_op_determinism if before else tf_config.disable_op_determinism)()


def output_modes(config, verbose, progress_seconds) -> tuple:
    """The verbosity and the progress line's interval. On a terminal, Keras's progress bar; in a log
    file (stdout not a terminal) ``verbose`` 1 is our progress line about every PROGRESS_SECONDS (the
    run's step, rate and time left) in place of Keras's lines, which the TaskLoop then silences; 2 keeps them."""
    verbose = config.train.verbose if verbose is None else verbose
    if progress_seconds is None:
        progress_seconds = PROGRESS_SECONDS if verbose and not sys.stdout.isatty() else 0
    return verbose, progress_seconds


# ----------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gcl_tf.train", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="YAML config file (see configs/)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set train.learning_rate=0.01 (repeatable)")
    parser.add_argument("--output", help="output folder (default: the config's output_dir)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--overwrite", action="store_true",
                      help="replace the run in the output folder (a finished one's results.json, an unfinished "
                           "one's checkpoints)")
    mode.add_argument("--resume", action="store_true",
                      help="continue the run in the output folder from its last checkpoint (same config)")
    parser.add_argument("--init-from", metavar="RUN_DIR",
                        help="start from a finished run's learner (its weights, optimizer and memory) and learn this "
                             "config's tasks after its own (sets init_from)")
    parser.add_argument("--deterministic", action="store_true",
                        help="op determinism: the same seed gives a bit-identical run (sets train.deterministic)")
    return parser


def resume_command(argv) -> str:
    """The command that resumes the run ``argv`` started."""
    kept = [a for a in argv if a not in ("--overwrite", "--resume")]
    return " ".join(["python -m gcl_tf.train", *map(shlex.quote, kept), "--resume"])


@exit_on_user_error
def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    overrides = args.overrides + (["train.deterministic=true"] if args.deterministic else [])
    if args.init_from is not None:
        overrides.append(f"init_from={json.dumps(args.init_from)}")
    # Mistakes in the config, the paths, the folder and the data when its source needs no
    # TensorFlow: before TensorFlow loads, so they are reported in about a second (resuming, the
    # run's checkpoints and config.yaml once it loads).
    config = config_lib.precheck(args.config, overrides)
    output_dir = prechecks.train_folder(args.output, config, args.overwrite)  # another run's, with --overwrite too
    # A preview, before TensorFlow loads; the check that counts is train_model's under the folder's
    # lock (another run may finish or start in the folder in the seconds TensorFlow takes to load).
    check_output(output_dir, args.overwrite, args.resume)
    if not args.resume:  # a resumed run restores its own checkpoint
        check_init_from_folder(config, output_dir)
    prechecks.run_settings(config)
    benchmark = prechecks.early_benchmark(config)  # read once: the run trains on it
    import_tensorflow()  # quietly, before the method's module imports it
    try:
        run(config, output_dir, args.overwrite, benchmark=benchmark, resume=args.resume)
    except Stopped as stop:
        raise stop.with_hint(f"resume with: {resume_command(argv)}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
