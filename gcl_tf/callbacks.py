"""Keras callbacks of the continual driver: task boundaries, task-end evaluation, TensorBoard."""
from __future__ import annotations

import time

import keras
import numpy as np
import tensorflow as tf

from gcl_tf.data.protocols import Task
from gcl_tf.data.streams import eval_dataset


class TaskBoundary(keras.callbacks.Callback):
    """One task's boundaries around its ``fit``: the method's ``on_task_begin(index, classes)``
    when training begins and ``on_task_end(index, dataset)`` when it ends (before evaluation).

    ``TaskBoundary(task)`` takes a task of :mod:`gcl_tf.benchmarks` (its index, classes and
    stream); or give ``TaskBoundary(index, dataset, classes)``: ``dataset`` is the task's stream
    of ``(images, labels)`` batches, which the end hook reads (EWC's Fisher, iCaRL's exemplars);
    ``classes`` (None: read from ``dataset`` where the method needs task boundaries) are the
    task's labels. ``model.fit`` adds one for the next task when none is given.
    """

    def __init__(self, task_index, dataset=None, classes=None):
        super().__init__()
        if isinstance(task_index, Task):
            task = task_index
            task_index, dataset = task.index, task.train if dataset is None else dataset
            classes = task.classes if classes is None else classes
        self.task_index = int(task_index)
        self.dataset = dataset
        self.classes = classes

    def task_classes(self):
        """The task's classes: as given, else the labels in its stream (task-aware methods only)."""
        if self.classes is None and not self.model.task_free and self.dataset is not None:
            self.classes = np.unique(np.concatenate([np.asarray(batch[1]).reshape(-1) for batch in self.dataset]))
        return self.classes

    def on_train_begin(self, logs=None):
        self.model.on_task_begin(self.task_index, self.task_classes())

    def on_train_end(self, logs=None):
        self.model.on_task_end(self.task_index, self.dataset)


class TaskEndEvaluation(keras.callbacks.Callback):
    """Evaluates every task at the end of each task: fills ``matrix[i][j]`` (percent).

    One instance lives across all tasks; call :meth:`begin_task` before each task's ``fit``. A
    resumed run starts from what its checkpoint saved: ``matrix``, ``variant_matrices`` (by
    variant name), ``eval_seconds`` and ``eval_samples``.
    """

    def __init__(self, benchmark, split: str = "test", batch_size: int = 500, writer=None, verbose: bool = True,
                 strategy=None, matrix=None, variant_matrices=None, eval_seconds: float = 0.0, eval_samples: int = 0):
        super().__init__()
        self.benchmark = benchmark
        self.strategy = strategy  # a tf.distribute strategy: each global batch is split over replicas
        self.split = split
        self.batch_size = batch_size
        self.writer = writer
        self.verbose = verbose
        T = benchmark.num_tasks
        self.matrix = np.full((T, T), np.nan) if matrix is None else np.array(matrix, dtype=np.float64)
        self.task_index = 0
        # One more matrix per evaluation variant of the model (model.evaluation_variants()),
        # created on first use (NaN rows until evaluated).
        self.variant_matrices = {name: np.array(m, dtype=np.float64) for name, m in (variant_matrices or {}).items()}
        self.eval_seconds = float(eval_seconds)
        self.eval_samples = int(eval_samples)  # real (unpadded) samples evaluated, over all task ends
        self._datasets = None

    def begin_task(self, task_index: int) -> None:
        """Before a task's ``fit``: the row its end fills."""
        self.task_index = int(task_index)

    def datasets(self):
        if self._datasets is None:
            self._datasets = [
                eval_dataset(task.eval_data(self.split), self.benchmark.class_mask(task), self.batch_size)
                for task in self.benchmark.tasks
            ]
            if self.strategy is not None:
                from gcl_tf.distribute import distribute_batches

                self._datasets = [distribute_batches(self.strategy, ds, self.batch_size) for ds in self._datasets]
        return self._datasets

    def evaluate_all(self, model) -> np.ndarray:
        row = []
        with model.evaluation_scope():  # no training in between: the model's state is frozen
            for task, ds in zip(self.benchmark.tasks, self.datasets()):
                logs = model.evaluate(ds, verbose=0, return_dict=True)
                row.append(100.0 * float(logs["accuracy"]))
                self.eval_samples += len(task.eval_data(self.split))
        return np.asarray(row)

    def variants(self, model) -> dict:
        """The model's evaluation variants, each with its accuracy matrix (created on first use)."""
        found = model.evaluation_variants()
        T = self.benchmark.num_tasks
        for name in found:
            self.variant_matrices.setdefault(name, np.full((T, T), np.nan))
        return found

    def on_train_end(self, logs=None):
        start = time.perf_counter()
        i = self.task_index
        self.matrix[i] = self.evaluate_all(self.model)
        for name, settings in self.variants(self.model).items():
            with self.model.evaluation_variant(settings):
                self.variant_matrices[name][i] = self.evaluate_all(self.model)
        self.eval_seconds += time.perf_counter() - start
        seen = float(np.mean(self.matrix[i, : i + 1]))
        if self.writer is not None:
            with self.writer.as_default(step=i + 1):
                tf.summary.scalar("accuracy/average_all_tasks", float(np.mean(self.matrix[i])))
                tf.summary.scalar("accuracy/average_tasks_seen", seen)
                for j, value in enumerate(self.matrix[i]):
                    tf.summary.scalar(f"accuracy/task_{j + 1:02d}", value)
                for name, matrix in self.variant_matrices.items():
                    tf.summary.scalar(f"accuracy_{name}/average_all_tasks", float(np.mean(matrix[i])))
                    tf.summary.scalar(f"accuracy_{name}/average_tasks_seen", float(np.mean(matrix[i, : i + 1])))
                graph = self.model.context_graph()
                if graph is not None:
                    tf.summary.image("context_graph", graph_image(*graph)[None])
            self.writer.flush()
        if self.verbose:
            print(f"  after task {i + 1}: {self.split} accuracy on tasks seen {seen:.2f}%, "
                  f"on all tasks {np.mean(self.matrix[i]):.2f}%", flush=True)
            for name, matrix in self.variant_matrices.items():
                print(f"  after task {i + 1} ({name}): {self.split} accuracy on tasks seen "
                      f"{np.mean(matrix[i, : i + 1]):.2f}%, on all tasks {np.mean(matrix[i]):.2f}%", flush=True)


def graph_image(graph, labels) -> np.ndarray:
    """A context graph [C, C] as an RGB image [C, C, 3] in [0, 1] (viridis), rows and columns
    sorted by label (stable), as the paper's context-graph figure."""
    from matplotlib import colormaps

    order = np.argsort(np.asarray(labels), kind="stable")
    return colormaps["viridis"](np.clip(np.asarray(graph)[order][:, order], 0.0, 1.0))[..., :3].astype(np.float32)


class StepLogger(keras.callbacks.Callback):
    """Writes the step's loss terms to TensorBoard every ``every`` training steps."""

    def __init__(self, writer, every: int):
        super().__init__()
        self.writer = writer
        self.every = every
        self.step = None

    def on_train_begin(self, logs=None):
        if self.step is None:  # once per run: continue from the model's counter (resume)
            self.step = int(self.model.step_counter.numpy())
        self._per_call = max(1, int(self.model.steps_per_execution))

    def on_train_batch_end(self, batch, logs=None):
        previous = self.step
        self.step += self._per_call
        if not self.every or not logs or self.step // self.every == previous // self.every:
            return
        with self.writer.as_default(step=self.step):
            for name, value in logs.items():
                tf.summary.scalar(f"train/{name}", float(value))


class PeriodicCheckpoint(keras.callbacks.Callback):
    """Checkpoints during a task's ``fit`` and stops a run whose steps stopped being finite.

    Every ``every`` training steps (counted on the model's global step) calls ``save(batches)``
    with the batches of the task done so far, except at the task's last step: the driver saves
    after the task-end evaluation. ``check()`` (one scalar read of the model's non-finite flag)
    runs before each of those saves and when ``fit`` ends, before the task-end hooks, so a
    diverged run stops at the next check with the last good checkpoint kept. No per-step host
    sync: the step is counted in Python, as :class:`StepLogger` does. ``stop(batches)``, if
    given, runs after every step but a task's last (a signal's save-and-stop, which raises).
    """

    def __init__(self, every: int, save, check, stop=None):
        super().__init__()
        self.every = int(every)
        self.save = save
        self.check = check
        self.stop = stop
        self.task_first_step = 0
        self.task_steps = 0
        self.step = None

    def begin_task(self, task_first_step: int, task_steps: int) -> None:
        """Before a task's ``fit``: the global step before its first batch and its number of steps."""
        self.task_first_step = int(task_first_step)
        self.task_steps = int(task_steps)

    def on_train_begin(self, logs=None):
        self.step = int(self.model.step_counter.numpy())
        self._per_call = max(1, int(self.model.steps_per_execution))

    def on_train_batch_end(self, batch, logs=None):
        previous = self.step
        self.step += self._per_call
        done = self.step - self.task_first_step
        if done >= self.task_steps:
            return
        if self.every and self.step // self.every != previous // self.every:
            self.save(done)
        if self.stop is not None:
            self.stop(done)

    def on_train_end(self, logs=None):
        self.check()


def _duration(seconds: float) -> str:
    seconds = int(round(max(seconds, 0.0)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class ProgressLine(keras.callbacks.Callback):
    """One line about every ``every`` seconds while a task trains, for output that is not a
    terminal (a log file has no progress bar)::

        task 2/5 step 812/2000, run 2812/10000 steps, 1.42 steps/s, about 1h25m of training left

    The rate is measured over the steps since the last line (evaluation excluded); the time left
    is the run's remaining training steps at that rate. No per-step host sync: the step is
    counted in Python, as :class:`StepLogger` does. ``clock`` is for tests.
    """

    def __init__(self, every: float = 60.0, run_steps: int = 0, done_before: int = 0, num_tasks: int = 1,
                 prefix: str = "  ", print_fn=None, clock=time.monotonic):
        super().__init__()
        self.every = float(every)
        self.run_steps = int(run_steps)  # every training step of the run, the ones done before included
        self.run_done = int(done_before)
        self.num_tasks = int(num_tasks)
        self.prefix = prefix
        self.print_fn = print_fn or (lambda text: print(text, flush=True))
        self.clock = clock
        self.task, self.task_steps, self.task_done = 0, 0, 0

    def begin_task(self, task: int, task_steps: int, done: int = 0) -> None:
        """Before a task's ``fit``: its index, its number of steps and those already done (resume)."""
        self.task, self.task_steps, self.task_done = int(task), int(task_steps), int(done)

    def on_train_begin(self, logs=None):
        self._per_call = max(1, int(self.model.steps_per_execution))
        self._mark = (self.clock(), self.run_done)

    def on_train_batch_end(self, batch, logs=None):
        self.task_done += self._per_call
        self.run_done += self._per_call
        now = self.clock()
        since, steps_then = self._mark
        if now - since < self.every:
            return
        rate = (self.run_done - steps_then) / max(now - since, 1e-9)
        left = max(self.run_steps - self.run_done, 0) / rate if rate > 0 else float("inf")
        self.print_fn(f"{self.prefix}task {self.task + 1}/{self.num_tasks} step {self.task_done}/{self.task_steps}, "
                      f"run {self.run_done}/{self.run_steps} steps, {rate:.2f} steps/s, "
                      f"about {_duration(left)} of training left")
        self._mark = (now, self.run_done)
