"""Checkpoints of a continual run (``DIR/checkpoints``): everything a killed run needs to go on.

A checkpoint (``tf.train.Checkpoint`` under a ``tf.train.CheckpointManager``) holds
- the model: weights, BatchNorm statistics and the whole method state, which every method keeps in
  tf.Variables (episodic memories with their labels, GCL's best losses and edge logits, EWC's
  Fisher and anchors, iCaRL's exemplars and previous network, the task class masks, counters);
- the optimizer: its step count and slots (Adam's moments);
- :class:`Progress`: the position in the stream (tasks finished, batches done in the current
  task), the accuracy matrix so far and the timings.
Randomness needs nothing more: every random draw is stateless, keyed on the run's seed and the
step counters saved above (no Keras SeedGenerator is used; one inside a layer would be saved
with the model's variables), and a task's batch order is precomputed from the seed, so a resumed
task's stream with the batches done skipped (``dataset.skip(k)``, gcl_tf/task_loop.py) is the rest
of the stream exactly.

Writes are atomic by design: TensorFlow writes the checkpoint's files first, then replaces the
small ``checkpoint`` index file (write to a temporary file, then rename), and only then deletes
the checkpoint it supersedes. A kill at any moment leaves the index pointing at a complete one.
The last two are kept: when the newest was damaged afterwards (a disk or copy fault),
``--resume`` restores the one before. A write that fails (a full disk) removes what it wrote and
leaves the index and the kept checkpoints as they were.
"""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import sys

import numpy as np
import tensorflow as tf

from gcl_tf.errors import TrainingError, UserError
from gcl_tf.faults import disk_error
from gcl_tf.run_layout import checkpoint_dir

# The last two: the one a save supersedes is deleted only after it is complete, and the one
# before it is there for a newest checkpoint damaged later (a truncated or garbled file).
MAX_TO_KEEP = 2


class Progress(tf.Module):
    """Where a run is, saved with the model: ``task`` tasks are finished and ``batch`` batches of
    task ``task`` are done; the accuracy matrix rows of the finished tasks (NaN elsewhere), the
    seconds spent training each task and evaluating, and where the run's learner started."""

    def __init__(self, num_tasks: int, num_variants: int = 0, name: str = "progress"):
        super().__init__(name=name)
        with self.name_scope:
            self.task = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="task")
            self.batch = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="batch")
            self.accuracy = tf.Variable(np.full([num_tasks, num_tasks], np.nan), trainable=False,
                                        dtype=tf.float64, name="accuracy")  # [T, T] percent
            # The accuracy matrices of the model's evaluation variants, in their order (none: no
            # variable, and the checkpoint is as without variants).
            self.variant_accuracy = None if not num_variants else tf.Variable(
                np.full([num_variants, num_tasks, num_tasks], np.nan), trainable=False, dtype=tf.float64,
                name="variant_accuracy")
            self.task_seconds = tf.Variable(tf.zeros([num_tasks], tf.float64), trainable=False, name="task_seconds")
            self.eval_seconds = tf.Variable(tf.constant(0.0, tf.float64), trainable=False, name="eval_seconds")
            self.eval_samples = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="eval_samples")
            # Where the run's learner started (a learner from init_from, else 0): the tasks it had
            # begun (this run's task i is the learner's task offset + i) and its step counter.
            self.task_offset = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="task_offset")
            self.first_step = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="first_step")

    def record(self, task: int, batch: int, accuracy, task_seconds, eval_seconds: float, eval_samples: int,
               variant_accuracy=None) -> None:
        self.task.assign(task)
        self.batch.assign(batch)
        self.accuracy.assign(np.asarray(accuracy, np.float64))
        if self.variant_accuracy is not None:
            self.variant_accuracy.assign(np.asarray(variant_accuracy, np.float64))
        self.task_seconds.assign(np.asarray(task_seconds, np.float64))
        self.eval_seconds.assign(float(eval_seconds))
        self.eval_samples.assign(int(eval_samples))


def latest_checkpoint(output_dir: str):
    """The path prefix of the last complete checkpoint of ``output_dir``, or None."""
    folder = checkpoint_dir(output_dir)
    return tf.train.latest_checkpoint(folder) if os.path.isdir(folder) else None


def saved_checkpoints(output_dir: str) -> list[str]:
    """The path prefixes of the checkpoints the index of ``output_dir`` lists, newest first."""
    folder = checkpoint_dir(output_dir)
    state = tf.train.get_checkpoint_state(folder) if os.path.isdir(folder) else None
    if state is None or not state.model_checkpoint_path:
        return []
    # get_checkpoint_state already joins ``folder`` to the relative names the index holds.
    paths = list(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    return list(reversed(paths))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0].split(" [Op:")[0] if text else error.__class__.__name__


class RunCheckpoints:
    """The model, its optimizer and a :class:`Progress`, saved under ``DIR/checkpoints``.

    Built once the model is compiled (the optimizer's slots exist), so a restore fills every
    variable at once. A distribution strategy's ``scope()`` may wrap the construction and
    :meth:`restore`.
    """

    def __init__(self, model, num_tasks: int, output_dir: str):
        self.model = model
        self.folder = checkpoint_dir(output_dir)
        variants = model.evaluation_variants()
        self.progress = Progress(num_tasks, len(variants))
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, progress=self.progress)
        self._manager = None
        self.saved_step = None  # global step of the last checkpoint written or restored
        # The task being trained and the global step before its first batch (for messages).
        self.task = 0
        self.task_first_step = 0

    def begin_task(self, task: int, first_step: int) -> None:
        """Before a task's ``fit``: its index and the global step before its first batch."""
        self.task, self.task_first_step = int(task), int(first_step)

    @property
    def manager(self) -> tf.train.CheckpointManager:
        if self._manager is None:  # created on first use: it creates the folder
            self._manager = tf.train.CheckpointManager(self.checkpoint, self.folder, max_to_keep=MAX_TO_KEEP)
        return self._manager

    def restore(self, path: str, key: str = "--resume",
                advice: str = "was the data changed? start a new run in another --output") -> None:
        """Restore every saved variable from ``path``; a UserError if it does not fit the model
        built from the config (another dataset shape, a damaged file), naming ``key``, the
        argument that chose the checkpoint."""
        try:
            self._restore(path)
        except Exception as error:  # noqa: BLE001 - a damaged file fails in many ways
            raise UserError(
                f"{key}: cannot restore {path} into the model built from the config ({_first_line(error)}); {advice}"
            ) from None

    def _restore(self, path: str) -> None:
        self.checkpoint.restore(path).assert_existing_objects_matched()
        self.saved_step = int(self.model.step_counter.numpy())

    def restore_newest(self, candidates: list[str]) -> str:
        """Restore the newest of ``candidates`` (newest first) that restores completely and
        return it. Newer ones that do not (a truncated or garbled file) are named in one line
        on stderr and removed, so that the checkpoints kept from now on are good ones; a
        one-line UserError naming every file when none restores."""
        failures = []
        for path in candidates:
            try:
                self._restore(path)
            except Exception as error:  # noqa: BLE001 - a damaged file fails in many ways
                failures.append((path, _first_line(error)))
                continue
            if failures:
                skipped = "; ".join(f"{os.path.basename(p)} does not restore ({why})" for p, why in failures)
                print(f"warning: {skipped}: removed; resuming from {os.path.basename(path)}, the newest "
                      f"checkpoint that restores", file=sys.stderr, flush=True)
                self._forget([p for p, _ in failures], candidates)
            return path
        listed = "; ".join(f"{p} ({why})" for p, why in failures)
        raise UserError(
            f"--resume: no checkpoint of {self.folder} restores into the model built from the config: {listed}; "
            "if the data changed, resume with the run's data, else start a new run in another --output"
        )

    def _forget(self, damaged: list[str], candidates: list[str]) -> None:
        """Remove the ``damaged`` checkpoints' files and list only the others in the index, as
        CheckpointManager writes it: names relative to the folder (it can still be moved) and
        each one's time, by which the manager deletes the superseded ones later (a checkpoint
        listed without one would be kept for good, a third beside the last two)."""
        for path in damaged:
            for name in glob.glob(glob.escape(path) + ".*"):
                os.unlink(name)
        state = tf.train.get_checkpoint_state(self.folder)
        times = dict(zip(state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps)) if state else {}
        kept = [p for p in reversed(candidates) if p not in damaged]  # oldest first, as the index
        tf.__internal__.train.update_checkpoint_state(  # (tf.compat.v1's is deprecated, and says so)
            self.folder, kept[-1], kept, save_relative_paths=True,
            all_model_checkpoint_timestamps=[times.get(p) or os.path.getmtime(p + ".index") for p in kept],
            last_preserved_timestamp=state.last_preserved_timestamp if state else None)

    def check_finite(self) -> None:
        """A TrainingError naming the step (and its task and batch) if a step was not finite.

        One scalar read: called when a checkpoint is due and when a task ends, never per step.
        """
        step = int(self.model.first_nonfinite_step.numpy())
        if step == 0:
            return
        kept = (f"the last good checkpoint (step {self.saved_step}) is kept in {self.folder}, with the run's "
                "config.yaml and TensorBoard logs, to show how far it got (--overwrite starts it again)"
                if self.saved_step is not None else "no checkpoint was written")
        raise TrainingError(
            f"training diverged: the loss or the weights became NaN or infinite at step {step} "
            f"(task {self.task + 1}, batch {step - self.task_first_step} of the task); training stopped and "
            f"{kept}; lower train.learning_rate or check the data"
        )

    def save(self, progress: dict) -> str:
        """Check that no step diverged, record ``progress`` (the keyword arguments of
        :meth:`Progress.record`) and write a checkpoint numbered by the global step. A write that
        fails (a full disk) is a one-line DiskError; what it wrote is removed."""
        self.check_finite()
        self.progress.record(**progress)
        step = int(self.model.step_counter.numpy())
        try:
            path = self.manager.save(checkpoint_number=step)
        except (OSError, tf.errors.OpError) as error:
            self._remove_partial(step)
            kept = (f"then continue with --resume from the checkpoint of step {self.saved_step}, which is kept"
                    if self.saved_step is not None else "then run again")
            raise disk_error(os.path.join(self.folder, f"ckpt-{step}"), error, kept) from None
        self.saved_step = step
        return path

    def _remove_partial(self, step: int) -> None:
        """The files of a checkpoint whose write failed (unless the index lists it: then it is
        an earlier complete one of the same number)."""
        prefix = os.path.join(self.folder, f"ckpt-{step}")
        with contextlib.suppress(Exception):  # never hide the error of the write
            if prefix in saved_checkpoints(os.path.dirname(self.folder)):
                return
            for name in glob.glob(glob.escape(prefix) + ".*") + glob.glob(glob.escape(prefix) + "_temp*"):
                if os.path.isdir(name):
                    shutil.rmtree(name, ignore_errors=True)
                else:
                    os.unlink(name)
