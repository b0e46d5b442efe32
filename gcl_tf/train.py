"""Train a method on a continual stream: ``python -m gcl_tf.train --config FILE [--set k=v ...]``.

Tasks are learned in order with ``model.fit`` (one online epoch by default); at the end of each
task every task is evaluated (a Keras callback), filling the accuracy matrix ``R[i][j]``.
Writes ``DIR/results.json`` (never overwritten without ``--overwrite``), ``DIR/config.yaml``,
``DIR/model.json`` (what ``gcl_tf.export`` needs besides the checkpoint), ``DIR/learner.keras``
(the learner saved whole, memory included: ``gcl_tf.load_model``), TensorBoard logs under
``DIR/tensorboard`` and checkpoints under ``DIR/checkpoints`` (every ``train.checkpoint_every``
steps and at every task end); ``--resume`` continues a killed run from its last checkpoint;
``--init-from RUN_DIR`` starts from a finished run's learner (gcl_tf/learner.py).
One run at a time holds ``DIR`` (a lock, see gcl_tf/faults.py); SIGTERM or Ctrl-C saves a
checkpoint at the next step and stops (exit status 128 + the signal); docs/reliability.md.
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import contextlib
import dataclasses
import datetime
import json
import shlex
import shutil
import sys
import tempfile
import time
import warnings

import numpy as np

from gcl_tf import config as config_lib
from gcl_tf.errors import DiskError, Stopped, UserError, exit_on_user_error
from gcl_tf.faults import StopSignals, exclusive
from gcl_tf.io import write_atomic, write_json_atomic, write_npz_atomic
from gcl_tf.learner import LEARNER, write_learner
from gcl_tf.quiet import import_tensorflow

RESULTS = "results.json"
ARTIFACTS = "artifacts.npz"  # arrays for the figures (gcl_tf.benchmark): model.export_artifacts
PROGRESS_SECONDS = 60.0  # a progress line about once a minute in a log file (train.run's progress_seconds)
MODEL_INFO = "model.json"  # input shape, classes and method: what gcl_tf.export needs with the checkpoint


def check_output(output_dir: str, overwrite: bool, resume: bool = False) -> None:
    """Refuse to replace a finished run (no write here: bad input must leave the folder alone)."""
    results = os.path.join(output_dir, RESULTS)
    if os.path.exists(results) and resume:
        raise UserError(f"--resume: {results} exists, the run is finished; nothing to resume")
    if os.path.exists(results) and not overwrite:
        raise UserError(f"{results} exists; pass --overwrite to replace it or choose another --output")


def prepare_output(output_dir: str, overwrite: bool) -> None:
    check_output(output_dir, overwrite)
    os.makedirs(output_dir, exist_ok=True)


def model_class(config):
    from gcl_tf import methods

    return methods.method_class(config.method.name)


def build_model(config, benchmark):
    from gcl_tf import methods

    # the method's layers under the configured Keras dtype policy (train.mixed_precision)
    return methods.build(config, benchmark.input_shape, benchmark.num_classes)


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


def is_chief(strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    return task_type == "chief" or (task_type == "worker" and task_id == 0 and
                                     "chief" not in resolver.cluster_spec().as_dict())


def build_training_state(config, benchmark, output_dir: str, resume_from=None, init_from=None):
    """The compiled model and its checkpoints, restored from the newest of ``resume_from`` (the
    checkpoints to resume from, newest first) that restores, if given; else, with ``init_from``
    (:func:`gcl_tf.learner.check_init_from`'s answer), starting from that run's learner.

    Everything that creates variables happens here (a distribution strategy's scope goes around
    this call).
    """
    from gcl_tf.checkpoint import RunCheckpoints

    model = build_model(config, benchmark)
    model.compile_for_training(config.train)
    checkpoints = RunCheckpoints(model, benchmark.num_tasks, output_dir)
    if resume_from is not None:
        checkpoints.restore_newest(resume_from)
    elif init_from is not None:
        from gcl_tf.learner import start_from_learner

        offset = start_from_learner(model, init_from["learner"], config, benchmark.num_tasks)
        checkpoints.progress.task_offset.assign(offset)
        checkpoints.progress.first_step.assign(int(model.step_counter.numpy()))
    return model, checkpoints


@contextlib.contextmanager
def finishing():
    """The last writes of a run: a failed one says that the run's checkpoint is kept."""
    try:
        yield
    except DiskError as error:
        raise DiskError(f"{error}, then finish the run with --resume (its last checkpoint is kept)") from None


def model_info(config, benchmark) -> dict:
    names = benchmark.source.class_names()
    return {
        "method": config.method.name,
        "input_shape": [int(d) for d in benchmark.input_shape],
        "num_classes": int(benchmark.num_classes),
        "class_names": [str(n) for n in names[: benchmark.num_classes]] if names else None,
    }


def start_output(output_dir: str, config, benchmark) -> None:
    """A fresh run: replace what an earlier run left (its checkpoints, an overwritten results
    file), then write the config and the model description."""
    from gcl_tf.checkpoint import checkpoint_dir

    os.makedirs(output_dir, exist_ok=True)
    shutil.rmtree(checkpoint_dir(output_dir), ignore_errors=True)
    for name in (RESULTS, ARTIFACTS, LEARNER):
        if os.path.exists(os.path.join(output_dir, name)):
            os.unlink(os.path.join(output_dir, name))
    write_atomic(os.path.join(output_dir, "config.yaml"), config_lib.config_to_yaml(config))
    write_json_atomic(os.path.join(output_dir, MODEL_INFO), model_info(config, benchmark))


def run(config, output_dir=None, overwrite: bool = False, verbose=None, benchmark=None, resume: bool = False,
        progress_seconds=None, _strategy=None) -> dict:
    """Train and evaluate one configuration; returns (and writes) the results dictionary.

    ``resume``: continue from the last checkpoint in ``output_dir`` (the config must match the
    run's ``config.yaml``). Bad input (config, data, a missing checkpoint, more memory than the
    device has) raises a UserError before anything in ``output_dir`` is written; another run
    holding ``output_dir`` a FolderBusy. SIGTERM or SIGINT during training saves a checkpoint at
    the next step and raises :class:`gcl_tf.errors.Stopped`. ``progress_seconds``: a progress
    line (step, steps/s, time left) about that often while a task trains; None: every
    PROGRESS_SECONDS when ``verbose`` and the output is not a terminal (a log file), else none.
    """
    import keras
    import tensorflow as tf

    from gcl_tf.checkpoint import check_resumable
    from gcl_tf.data import ContinualBenchmark
    from gcl_tf.data.streams import task_steps_per_epoch
    from gcl_tf.resources import check_memory

    output_dir = output_dir or config.output_dir
    config = dataclasses.replace(config, output_dir=output_dir)  # the saved config.yaml names this run's folder
    verbose = config.train.verbose if verbose is None else verbose
    if verbose == 1 and not sys.stdout.isatty():  # piped to a log: a plain line per task, no progress-bar escapes
        verbose = 2
    if progress_seconds is None:
        progress_seconds = PROGRESS_SECONDS if verbose and not sys.stdout.isatty() else 0
    check_output(output_dir, overwrite, resume)
    if resume:
        check_resumable(output_dir, config)

    if config.train.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.seed)
    if benchmark is None:
        benchmark = ContinualBenchmark(config.benchmark, config.seed, load_test=config.eval.split == "test")
    for task in benchmark.tasks:  # every task has a batch, before anything is written
        task_steps_per_epoch(len(task.train), config.train.batch_size, task.index)
    if resume and config.train.distribute == "multi_worker":
        raise UserError("--resume: not available with train.distribute: multi_worker; allowed: none, mirrored")
    strategy = _strategy if _strategy is not None else make_strategy(config, model_class(config))
    if _strategy is None and strategy is not None and not is_chief(strategy):
        # A non-chief worker takes part in every step but writes into a scratch folder.
        with tempfile.TemporaryDirectory(prefix="gcl_tf-worker-") as scratch:
            return run(config, output_dir=scratch, overwrite=True, verbose=0, benchmark=benchmark,
                       progress_seconds=0, _strategy=strategy)
    init_from = None
    if config.init_from is not None and not resume:  # a resumed run restores its own checkpoint
        from gcl_tf.learner import check_init_from

        init_from = check_init_from(config, benchmark, output_dir)
    check_memory(config, benchmark.input_shape, num_classes=benchmark.num_classes)
    # Multi-worker training stops together or not at all: there a signal ends the process.
    with exclusive(output_dir), StopSignals(enabled=config.train.distribute != "multi_worker") as stop:
        check_output(output_dir, overwrite, resume)  # again, now that no other run can change the folder
        resume_from = check_resumable(output_dir, config) if resume else None
        return _train(config, output_dir, verbose, benchmark, strategy, resume_from, stop, init_from,
                      progress_seconds)


def _train(config, output_dir: str, verbose, benchmark, strategy, resume_from, stop: StopSignals,
           init_from=None, progress_seconds=0) -> dict:
    """:func:`run` in the folder it holds: build (or restore) the model, train, write the results."""
    import tensorflow as tf

    from gcl_tf import metrics
    from gcl_tf.callbacks import PeriodicCheckpoint, ProgressLine, StepLogger, TaskBoundary, TaskEndEvaluation
    from gcl_tf.data.streams import task_steps_per_epoch, train_dataset
    from gcl_tf.distribute import distribute_batches

    if strategy is not None:  # a distributed iterator reports its end as running out of data
        warnings.filterwarnings("ignore", message="Your input ran out of data", category=UserWarning)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model, checkpoints = build_training_state(config, benchmark, output_dir, resume_from, init_from)
    resumed_step = checkpoints.saved_step  # None for a fresh run
    if resume_from is None:
        start_output(output_dir, config, benchmark)

    T = benchmark.num_tasks
    progress = checkpoints.progress
    first_task, skip = int(progress.task.numpy()), int(progress.batch.numpy())
    # This run's task i is the learner's task offset + i (offset > 0: a learner from init_from).
    offset, first_step = int(progress.task_offset.numpy()), int(progress.first_step.numpy())
    writer = tf.summary.create_file_writer(os.path.join(output_dir, "tensorboard"))
    evaluator = TaskEndEvaluation(benchmark, config.eval.split, config.eval.batch_size, writer, verbose=verbose > 0,
                                  strategy=strategy)
    evaluator.matrix = progress.accuracy.numpy().copy()
    for k, name in enumerate(evaluator.variants(model)):
        evaluator.variant_matrices[name] = progress.variant_accuracy[k].numpy().copy()
    evaluator.eval_seconds = float(progress.eval_seconds.numpy())
    evaluator.eval_samples = int(progress.eval_samples.numpy())
    task_seconds = progress.task_seconds.numpy().copy()
    step_logger = StepLogger(writer, config.train.log_every)
    if init_from is not None and verbose:
        print(f"Starting from the learner of {init_from['run']}: {offset} tasks and {first_step} steps behind it; "
              f"this run's task 1 is its task {offset + 1}", flush=True)
    if resume_from is not None and verbose:
        print(f"Resuming {output_dir} from step {checkpoints.saved_step}: task {min(first_task + 1, T)}/{T}, "
              f"batch {skip}", flush=True)

    clock = {}

    def train_seconds_so_far(i):
        return task_seconds[i] + time.perf_counter() - clock["start"] - (evaluator.eval_seconds - clock["eval"])

    def progress_now(task, batch, seconds):
        return dict(task=task, batch=batch, accuracy=evaluator.matrix, task_seconds=seconds,
                    eval_seconds=evaluator.eval_seconds, eval_samples=evaluator.eval_samples,
                    variant_accuracy=list(evaluator.variant_matrices.values()))

    def save_mid_task(batches_done):
        seconds = task_seconds.copy()
        seconds[checkpoints.task] = train_seconds_so_far(checkpoints.task)
        checkpoints.save(progress_now(checkpoints.task, batches_done, seconds))

    def stop_if_asked(batches_done=None):
        """After a step (``batches_done`` of the task) or a task's end: on a signal, save (unless
        this step was just saved) and stop."""
        if stop.received is None:
            return
        step = int(model.step_counter.numpy())
        if batches_done is not None and checkpoints.saved_step != step:
            save_mid_task(batches_done)
        where = (f"task {checkpoints.task + 1}/{T}, batch {batches_done}" if batches_done is not None
                 else f"after task {checkpoints.task + 1}/{T}")
        raise Stopped(f"{stop.name} received: stopped at step {step} ({where}) and saved its checkpoint in "
                      f"{checkpoints.folder}", stop.received)

    periodic = PeriodicCheckpoint(config.train.checkpoint_every, save_mid_task, checkpoints.check_finite,
                                  stop=stop_if_asked)
    task_steps = [task_steps_per_epoch(len(t.train), config.train.batch_size, t.index) * config.train.epochs
                  for t in benchmark.tasks]
    progress_line = ProgressLine(progress_seconds, run_steps=sum(task_steps),
                                 done_before=sum(task_steps[:first_task]) + skip, num_tasks=T)
    for i in range(first_task, T):
        task = benchmark.tasks[i]  # its data is the protocol's task task.index
        done = skip if i == first_task else 0
        if verbose:
            resumed = f", resumed at batch {done}" if done else ""
            print(f"Task {i + 1}/{T} ({task.description}): {len(task.train)} training samples{resumed}", flush=True)
        # The whole stream of the task goes to the task-end hooks (EWC's Fisher, iCaRL's
        # exemplars read it); a resumed task trains on the rest of it, as one pass.
        augment = config.benchmark.augment
        dataset, steps = train_dataset(task.train, config.train.batch_size, config.train.epochs, config.seed,
                                       task.index, augment=augment)
        total = steps * config.train.epochs
        if done:
            remaining, _ = train_dataset(task.train, config.train.batch_size, config.train.epochs, config.seed,
                                         task.index, skip_batches=done, augment=augment)
            fit_args = dict(x=remaining, epochs=1, steps_per_epoch=total - done)
        else:
            fit_args = dict(x=dataset, epochs=config.train.epochs, steps_per_epoch=steps)
        if strategy is not None:  # replica r gets the r-th slice of every global batch
            fit_args["x"] = distribute_batches(strategy, fit_args["x"], config.train.batch_size)
        evaluator.task_index = i
        checkpoints.task = i
        checkpoints.task_first_step = int(model.step_counter.numpy()) - done
        periodic.begin_task(checkpoints.task_first_step, total)
        progress_line.begin_task(i, total, done)
        clock.update(start=time.perf_counter(), eval=evaluator.eval_seconds)
        model.fit(
            **fit_args,
            callbacks=[periodic, TaskBoundary(offset + i, dataset, task.classes), evaluator, step_logger,
                       *([progress_line] if progress_seconds else [])],
            verbose=verbose,
            shuffle=False,
        )
        task_seconds[i] = train_seconds_so_far(i)
        checkpoints.save(progress_now(i + 1, 0, task_seconds))
        if i + 1 < T:  # after the last task the run just finishes
            stop_if_asked()
    writer.flush()
    artifacts = model.export_artifacts(benchmark, config.eval.split)
    with finishing():
        if artifacts:
            write_npz_atomic(os.path.join(output_dir, ARTIFACTS), artifacts)
        write_learner(model, output_dir)

    R = evaluator.matrix
    summary = metrics.summarize(R)
    results = {
        "method": config.method.name,
        "benchmark": f"{config.benchmark.name}-{config.benchmark.dataset}",
        "seed": config.seed,
        "deterministic": bool(config.train.deterministic),
        "eval_split": config.eval.split,
        "accuracy_matrix": R.tolist(),
        **summary,
        # The same evaluations under each of the model's evaluation variants (GCL's
        # also_test_graph_samples): {name: {settings, accuracy_matrix, acc, fgt, bwt}}.
        "evaluations": {name: {"settings": evaluator.variants(model)[name], "accuracy_matrix": matrix.tolist(),
                               **metrics.summarize(matrix)}
                        for name, matrix in evaluator.variant_matrices.items()},
        "train_seconds": float(sum(task_seconds)),
        "eval_seconds": float(evaluator.eval_seconds),
        "task_train_seconds": [float(s) for s in task_seconds],
        "train_steps": int(model.step_counter.numpy()) - first_step,
        # Stream samples trained on and (unpadded) samples evaluated: the per-sample times.
        "train_samples": (int(model.step_counter.numpy()) - first_step) * config.train.batch_size,
        "eval_samples": int(evaluator.eval_samples),
        "num_parameters": int(sum(np.prod(v.shape) for v in model.trainable_variables)),
        "resumed_from_step": resumed_step,
        # A run from another's learner: that run, the tasks its learner had begun and its steps.
        "init_from": None if config.init_from is None else {
            "run": os.path.abspath(config.init_from), "tasks_before": offset, "steps_before": first_step},
        "tensorflow_version": tf.__version__,
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": config.to_dict(),
    }
    with finishing():
        write_json_atomic(os.path.join(output_dir, RESULTS), results)
    if verbose:
        print(f"ACC {summary['acc']:.2f}  FGT {summary['fgt']:.2f}  BWT {summary['bwt']:.2f}  "
              f"(train {results['train_seconds']:.1f}s, eval {results['eval_seconds']:.1f}s) -> "
              f"{os.path.join(output_dir, RESULTS)}", flush=True)
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gcl_tf.train", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="YAML config file (see configs/)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set train.learning_rate=0.01 (repeatable)")
    parser.add_argument("--output", help="output folder (default: the config's output_dir)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--overwrite", action="store_true", help="replace an existing results.json")
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
    import_tensorflow()  # first, so a config error is the only line on stderr
    overrides = args.overrides + (["train.deterministic=true"] if args.deterministic else [])
    if args.init_from is not None:
        overrides.append(f"init_from={json.dumps(args.init_from)}")
    config = config_lib.load_config(args.config, overrides)
    try:
        run(config, output_dir=args.output, overwrite=args.overwrite, resume=args.resume)
    except Stopped as stop:
        raise stop.with_hint(f"resume with: {resume_command(argv)}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
