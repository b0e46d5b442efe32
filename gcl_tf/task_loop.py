"""The task loop of a run (:func:`gcl_tf.train.run` builds or restores the model, then runs it).

:class:`TaskLoop` trains the tasks in order from where the run's checkpoints left it
(:class:`Start`): :meth:`~TaskLoop.fit_task` runs ``model.fit`` on a task's stream, with the
callbacks that call the method's task-end hooks, evaluate every task at its end (the accuracy
matrix), log to TensorBoard and checkpoint every ``train.checkpoint_every`` steps;
:meth:`~TaskLoop.checkpoint_task_end` saves after each task and stops there on a signal;
:meth:`~TaskLoop.finish` writes the learner, the figures' arrays and :func:`run_results`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import time
from typing import Optional

import numpy as np
import tensorflow as tf

from gcl_tf import machine, metrics
from gcl_tf.artifacts import export_artifacts
from gcl_tf.backbones import describe as describe_trunk
from gcl_tf.callbacks import PeriodicCheckpoint, ProgressLine, StepLogger, TaskBoundary, TaskEndEvaluation
from gcl_tf.data.fingerprint import KEY, fingerprint
from gcl_tf.data.streams import task_steps_per_epoch, train_dataset
from gcl_tf.distribute import distribute_batches
from gcl_tf.errors import DiskError, Stopped
from gcl_tf.faults import StopSignals
from gcl_tf.io import write_json_atomic, write_npz_atomic
from gcl_tf.learner import write_learner
from gcl_tf.quiet import onednn_enabled
from gcl_tf.run_layout import ARTIFACTS, PLOTS, RESULTS, TENSORBOARD
from gcl_tf.run_plots import task_table, write_run_plots


@contextlib.contextmanager
def finishing():
    """The last writes of a run: a failed one says that the run's checkpoint is kept."""
    try:
        yield
    except DiskError as error:
        raise DiskError(f"{error}, then finish the run with --resume (its last checkpoint is kept)") from None


@dataclasses.dataclass(frozen=True)
class Start:
    """Where a run starts, from its checkpoints' progress (a fresh run: task 0, batch 0)."""

    task: int  # the first task to train
    batch: int  # its batches done before (a run resumed inside a task)
    task_offset: int  # this run's task i is the learner's task task_offset + i (> 0: from init_from)
    first_step: int  # the learner's step counter when this run began
    resumed_step: Optional[int]  # the step of the checkpoint a resumed run restored

    @classmethod
    def of(cls, checkpoints) -> "Start":
        p = checkpoints.progress
        return cls(int(p.task.numpy()), int(p.batch.numpy()), int(p.task_offset.numpy()), int(p.first_step.numpy()),
                   checkpoints.saved_step)


def saved_evaluations(progress, model) -> dict:
    """What a checkpoint's progress holds of the evaluations: TaskEndEvaluation's keywords."""
    variants = model.evaluation_variants()
    return dict(matrix=progress.accuracy.numpy(), eval_seconds=float(progress.eval_seconds.numpy()),
                eval_samples=int(progress.eval_samples.numpy()),
                variant_matrices={name: progress.variant_accuracy[k].numpy() for k, name in enumerate(variants)})


class TrainingClock:
    """The seconds spent training each task, its task-end evaluations left out."""

    def __init__(self, task_seconds, evaluator):
        self.task_seconds = np.array(task_seconds, dtype=np.float64)
        self._evaluator = evaluator
        self._task, self._start, self._eval_start = 0, 0.0, 0.0

    def begin_task(self, task: int) -> None:
        self._task, self._start, self._eval_start = task, time.perf_counter(), self._evaluator.eval_seconds

    def so_far(self) -> np.ndarray:
        """Every task's seconds, the current task's until now."""
        seconds = self.task_seconds.copy()
        seconds[self._task] += time.perf_counter() - self._start - (self._evaluator.eval_seconds - self._eval_start)
        return seconds

    def end_task(self) -> None:
        self.task_seconds = self.so_far()


def task_stream(train, seed: int, augment: str, task, done: int, strategy=None):
    """A task's training stream (the ``train`` section's batches and epochs, the run's ``seed``,
    the stream's ``augment``): the whole stream (the task-end hooks read it: EWC's Fisher,
    iCaRL's exemplars), ``fit``'s keyword arguments (a resumed task trains on the rest of it, as
    one pass) and the task's steps."""
    dataset, steps = train_dataset(task.train_data, train.batch_size, train.epochs, seed, task.index, augment=augment)
    total = steps * train.epochs
    if done:
        fit_args = dict(x=dataset.skip(done), epochs=1, steps_per_epoch=total - done)
    else:
        fit_args = dict(x=dataset, epochs=train.epochs, steps_per_epoch=steps)
    if strategy is not None:  # replica r gets the r-th slice of every global batch
        fit_args["x"] = distribute_batches(strategy, fit_args["x"], train.batch_size)
    return dataset, fit_args, total


class TaskLoop:
    """The tasks of a run in order, from where its checkpoints left it (:class:`Start`): fit a
    task (its end hooks and every task's evaluation run in ``fit``'s callbacks), checkpoint it,
    stop there on a signal; after the last, :meth:`finish` writes the learner and the results."""

    def __init__(self, config, output_dir: str, benchmark, model, checkpoints, strategy=None,
                 stop: Optional[StopSignals] = None, verbose=0, progress_seconds=0, init_from=None):
        self.config, self.output_dir, self.benchmark, self.strategy = config, output_dir, benchmark, strategy
        self.model, self.checkpoints, self.stop = model, checkpoints, stop
        self.verbose, self.init_from = verbose, init_from
        self.num_tasks = benchmark.num_tasks
        self.start = Start.of(checkpoints)
        self.writer = tf.summary.create_file_writer(os.path.join(output_dir, TENSORBOARD))
        self.evaluator = TaskEndEvaluation(benchmark, config.eval.split, config.eval.batch_size, self.writer,
                                           verbose=verbose > 0, strategy=strategy,
                                           **saved_evaluations(checkpoints.progress, model))
        self.clock = TrainingClock(checkpoints.progress.task_seconds.numpy(), self.evaluator)
        self.step_logger = StepLogger(self.writer, config.train.log_every)
        self.periodic = PeriodicCheckpoint(config.train.checkpoint_every, self.save_mid_task, checkpoints.check_finite,
                                           stop=self.stop_if_asked)
        steps = [task_steps_per_epoch(len(t.train_data), config.train.batch_size, t.index) * config.train.epochs
                 for t in benchmark.tasks]
        self.progress_line = ProgressLine(progress_seconds, run_steps=sum(steps), num_tasks=self.num_tasks,
                                          done_before=sum(steps[: self.start.task]) + self.start.batch
                                          ) if progress_seconds else None

    def run(self) -> dict:
        self.announce()
        for i in range(self.start.task, self.num_tasks):
            self.fit_task(i)
            self.checkpoint_task_end(i)
        return self.finish()

    def announce(self) -> None:
        start, T = self.start, self.num_tasks
        if self.verbose:  # what runs, in one line
            c = self.config
            print(f"{c.method.name} on {describe_trunk(c.model)}, {c.benchmark.name} {c.benchmark.dataset} "
                  f"({c.benchmark.source}), {T} tasks, batch {c.train.batch_size}, {c.train.optimizer} "
                  f"{c.train.learning_rate:g}"
                  + (f" (weight decay {c.train.weight_decay:g})" if c.train.weight_decay else "")
                  + (", random class order" if c.benchmark.class_order == "random" else "")
                  + f", seed {c.seed} -> {self.output_dir}", flush=True)
        if self.init_from is not None and self.verbose:
            print(f"Starting from the learner of {self.init_from['run']}: {start.task_offset} tasks and "
                  f"{start.first_step} steps behind it; this run's task 1 is its task {start.task_offset + 1}",
                  flush=True)
        if start.resumed_step is not None and self.verbose:
            print(f"Resuming {self.output_dir} from step {start.resumed_step}: task {min(start.task + 1, T)}/{T}, "
                  f"batch {start.batch}", flush=True)

    def fit_task(self, i: int) -> None:
        """Train task ``i`` (from the batch a resumed run stopped at); its end evaluates every task."""
        task = self.benchmark.tasks[i]  # its data is the protocol's task task.index
        done = self.start.batch if i == self.start.task else 0
        if self.verbose:
            resumed = f", resumed at batch {done}" if done else ""
            print(f"Task {i + 1}/{self.num_tasks} ({task.description}): {len(task.train_data)} training samples"
                  f"{resumed}", flush=True)
        config = self.config
        dataset, fit_args, total = task_stream(config.train, config.seed, config.benchmark.augment, task, done,
                                               self.strategy)
        first_step = int(self.model.step_counter.numpy()) - done
        self.evaluator.begin_task(i)
        self.checkpoints.begin_task(i, first_step)
        self.periodic.begin_task(first_step, total)
        extra = []
        if self.progress_line is not None:
            self.progress_line.begin_task(i, total, done)
            extra.append(self.progress_line)
        self.clock.begin_task(i)
        boundary = TaskBoundary(self.start.task_offset + i, dataset, task.classes)
        # verbose 1 with a progress line (a log file): the line in place of Keras's bar
        keras_verbose = 0 if self.verbose == 1 and self.progress_line is not None else self.verbose
        self.model.fit(**fit_args, callbacks=[self.periodic, boundary, self.evaluator, self.step_logger, *extra],
                       verbose=keras_verbose, shuffle=False)

    # ---- checkpoints
    def progress(self, task: int, batch: int, task_seconds) -> dict:
        """Where the run is, for :meth:`gcl_tf.checkpoint.Progress.record`."""
        e = self.evaluator
        return dict(task=task, batch=batch, accuracy=e.matrix, task_seconds=task_seconds, eval_seconds=e.eval_seconds,
                    eval_samples=e.eval_samples, variant_accuracy=list(e.variant_matrices.values()))

    def save_mid_task(self, batches_done: int) -> None:
        self.checkpoints.save(self.progress(self.checkpoints.task, batches_done, self.clock.so_far()))

    def checkpoint_task_end(self, i: int) -> None:
        self.clock.end_task()
        self.checkpoints.save(self.progress(i + 1, 0, self.clock.task_seconds))
        if i + 1 < self.num_tasks:  # after the last task the run just finishes
            self.stop_if_asked()

    def stop_if_asked(self, batches_done=None) -> None:
        """After a step (``batches_done`` of the task) or a task's end: on a signal, save (unless
        this step was just saved) and stop."""
        stop, checkpoints, T = self.stop, self.checkpoints, self.num_tasks
        if stop is None or stop.received is None:
            return
        step = int(self.model.step_counter.numpy())
        if batches_done is not None and checkpoints.saved_step != step:
            self.save_mid_task(batches_done)
        where = (f"task {checkpoints.task + 1}/{T}, batch {batches_done}" if batches_done is not None
                 else f"after task {checkpoints.task + 1}/{T}")
        raise Stopped(f"{stop.name} received: stopped at step {step} ({where}) and saved its checkpoint in "
                      f"{checkpoints.folder}", stop.received)

    # ---- results
    def finish(self) -> dict:
        """After the last task: the figures' arrays and the learner, then ``results.json`` (a
        run is finished once it exists)."""
        self.writer.flush()
        artifacts = export_artifacts(self.model, self.benchmark, self.config.eval.split)
        with finishing():
            if artifacts:
                write_npz_atomic(os.path.join(self.output_dir, ARTIFACTS), artifacts)
            write_learner(self.model, self.output_dir)
        results = run_results(self.config, self.model, self.evaluator, self.clock.task_seconds, self.start)
        # each task's classes, in the stream's order (benchmark.class_order: random draws them by seed)
        results["task_classes"] = [[int(k) for k in task.classes] for task in self.benchmark.tasks]
        path = os.path.join(self.output_dir, RESULTS)
        with finishing():
            write_json_atomic(path, results)
        if self.verbose:
            print(task_table(results))
            print(f"ACC {results['acc']:.2f}  FGT {results['fgt']:.2f}  BWT {results['bwt']:.2f}  "
                  f"(train {results['train_seconds']:.1f}s, eval {results['eval_seconds']:.1f}s) -> {path}", flush=True)
        draw_plots(self.output_dir, results)
        return results


def draw_plots(output_dir: str, results: dict) -> None:
    """``DIR/plots.png`` (gcl_tf/run_plots.py); a figure that cannot be drawn only warns: the run is finished."""
    try:
        write_run_plots(output_dir, results)
    except Exception as error:  # noqa: BLE001 - a picture is no reason to fail a finished run
        print(f"warning: {PLOTS} not written ({type(error).__name__}: {error})", flush=True)


def run_results(config, model, evaluator, task_seconds, start: Start) -> dict:
    """The results dictionary of a finished run (``results.json``)."""
    steps = int(model.step_counter.numpy()) - start.first_step
    variants = evaluator.variants(model)
    return {
        "method": config.method.name,
        "benchmark": f"{config.benchmark.name}-{config.benchmark.dataset}",
        "seed": config.seed,
        "deterministic": bool(config.train.deterministic),
        "eval_split": config.eval.split,
        "accuracy_matrix": evaluator.matrix.tolist(),
        **metrics.summarize(evaluator.matrix),
        # The same evaluations under each of the model's evaluation variants (GCL's
        # also_test_graph_samples): {name: {settings, accuracy_matrix, acc, fgt, bwt}}.
        "evaluations": {name: {"settings": variants[name], "accuracy_matrix": matrix.tolist(),
                               **metrics.summarize(matrix)}
                        for name, matrix in evaluator.variant_matrices.items()},
        "train_seconds": float(sum(task_seconds)),
        "eval_seconds": float(evaluator.eval_seconds),
        "task_train_seconds": [float(s) for s in task_seconds],
        "train_steps": steps,
        # Stream samples trained on and (unpadded) samples evaluated: the per-sample times.
        "train_samples": steps * config.train.batch_size,
        "eval_samples": int(evaluator.eval_samples),
        "num_parameters": int(sum(np.prod(v.shape) for v in model.trainable_variables)),
        "resumed_from_step": start.resumed_step,
        KEY: fingerprint(config.benchmark),  # its data by content: the same run wherever the data lies
        # A run from another's learner: that run, the tasks its learner had begun and its steps.
        "init_from": None if config.init_from is None else {
            "run": os.path.abspath(config.init_from), "tasks_before": start.task_offset,
            "steps_before": start.first_step},
        "tensorflow_version": tf.__version__,
        "onednn": onednn_enabled(),  # oneDNN's kernels on or off: the numbers' last digits differ by it
        "machine": machine.describe(),  # the times above are this machine's
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": config.to_dict(),
    }
