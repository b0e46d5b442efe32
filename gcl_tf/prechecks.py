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

import os

from gcl_tf import overwrite as overwrite_lib
from gcl_tf.data.counts import task_steps_per_epoch, validation_count
from gcl_tf.errors import UserError
from gcl_tf.faults import check_free, check_writable
from gcl_tf.run_layout import CONFIG, RUN_NAMES, SEARCH_FILE, SEARCH_NAMES

SEARCH = "a search of gcl_tf.tune"


def output_folder(folder: str, option: str = "--output") -> None:
    """``folder`` can be written (:func:`gcl_tf.faults.check_writable`) and no run holds it
    (:func:`gcl_tf.faults.check_free`): one line otherwise, nothing written."""
    check_writable(folder, option)
    check_free(folder, option)


def given_output(output, option: str = "--output"):
    """``output`` as given (None: not given); an empty one is refused, not read as the default."""
    if output is not None and not str(output).strip():
        raise UserError(f"{option}: empty; allowed: a folder's path (or leave {option} out for the config's "
                        "output_dir)")
    return output


def train_folder(output, config, overwrite: bool) -> str:
    """The training run's folder (``--output``, else the config's), checked: it can be written and
    no run holds it (:func:`output_folder`), it is no search's folder, and ``--overwrite``
    replaces only a run of gcl_tf.train there, never its ``init_from`` run or its data
    (gcl_tf/overwrite.py)."""
    folder = given_output(output) or config.output_dir
    output_folder(folder)
    if os.path.isfile(os.path.join(folder, SEARCH_FILE)):
        raise UserError(f"--output: {folder} is a search's folder (it holds {SEARCH_FILE}); allowed: a new folder "
                        "or a run's (python -m gcl_tf.tune writes searches)")
    if overwrite:
        if config.init_from is not None:  # its own words for init_from's folder as --output
            from gcl_tf.learner import check_init_folder

            check_init_folder(config.init_from, folder)
        overwrite_lib.check_apart(folder, {"init_from": config.init_from, "benchmark.path": config.benchmark.path},
                                  "--output")
        overwrite_lib.check_replaceable(folder, "--output", "a run of gcl_tf.train", RUN_NAMES, (CONFIG,))
    return folder


def search_folder(folder: str, config, overwrite: bool) -> None:
    """A search's folder (python -m gcl_tf.tune): :func:`output_folder`'s checks, then with
    ``--overwrite`` only a search there (its search.json and what KerasTuner and its trials
    write), never one holding the config's ``init_from`` run or its data."""
    output_folder(folder)
    if os.path.isdir(folder) and overwrite_lib.foreign(folder, ()) and not os.path.isfile(os.path.join(folder,
                                                                                                      SEARCH_FILE)):
        raise UserError(f"{folder} exists and holds no search ({SEARCH_FILE} is missing); choose another --output")
    if overwrite:
        overwrite_lib.check_apart(folder, {"init_from": config.init_from, "benchmark.path": config.benchmark.path},
                                  "--output")
        overwrite_lib.check_replaceable(folder, "--output", SEARCH, SEARCH_NAMES, (SEARCH_FILE,))


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
