"""What the command lines check before TensorFlow loads, beyond the config's own keys
(:func:`gcl_tf.config.precheck`): a mistake is then one line in about a second, not after the
seconds TensorFlow takes to import (docs/reliability.md, "Bad input").

- :func:`output_folder`: the output folder can be one (not a file, not under a file, on a disk
  that takes it) and no other run holds it, whatever ``--overwrite`` or ``--resume`` say;
- :func:`run_settings`: the rule between a method and the other sections that its module states
  (MER's plain SGD), and a batch larger than a task whose size the config gives
  (``benchmark.samples_per_task``);
- :func:`early_benchmark`: the data of a source read without TensorFlow (digits, npz, idx),
  loaded and checked now (its arrays, their shapes, a batch in every task); the run then trains
  on it, so it is read once.

Nothing here imports TensorFlow: tests/test_early_errors.py runs every such mistake with
TensorFlow made unimportable.
"""
from __future__ import annotations

from gcl_tf.data.counts import task_steps_per_epoch, validation_count
from gcl_tf.faults import check_free, check_writable


def output_folder(folder: str, option: str = "--output") -> None:
    """``folder`` can be written (:func:`gcl_tf.faults.check_writable`) and no run holds it
    (:func:`gcl_tf.faults.check_free`): one line otherwise, nothing written."""
    check_writable(folder, option)
    check_free(folder, option)


def task_train_size(benchmark) -> int | None:
    """A task's training samples when the config says how many (``samples_per_task`` less its
    validation split), else None (the data decides)."""
    samples = benchmark.samples_per_task
    if samples is None:
        return None
    held = validation_count(benchmark.validation_fraction, samples) if benchmark.validation_fraction > 0 else 0
    return samples - held if held < samples else None  # none left: the protocol says so


def run_settings(config) -> None:
    """A training batch larger than a task of the size the config gives (the method's own rules,
    MER's plain SGD among them, are its Config's: gcl_tf.config.precheck checks them)."""
    size = task_train_size(config.benchmark)
    if size is not None:
        first = config.benchmark.tasks[0] if config.benchmark.tasks else 0
        task_steps_per_epoch(size, config.train.batch_size, first)


def early_benchmark(config):
    """The run's :class:`gcl_tf.data.ContinualBenchmark`, read and checked now when its source
    needs no TensorFlow (each task holds a batch), else None (read once TensorFlow is loaded)."""
    from gcl_tf.data.protocols import ContinualBenchmark
    from gcl_tf.data.sources import SOURCES

    if SOURCES[config.benchmark.source].uses_tensorflow:
        return None
    benchmark = ContinualBenchmark(config.benchmark, config.seed, load_test=config.eval.split == "test")
    for task in benchmark.tasks:
        task_steps_per_epoch(len(task.train_data), config.train.batch_size, task.index)
    return benchmark
