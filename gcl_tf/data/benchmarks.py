"""Continual benchmarks for the Python API, ``gcl_tf.benchmarks``: a sequence of tasks
(:class:`gcl_tf.data.Task`), each with ``.train`` and ``.test`` ``tf.data`` datasets of
``(images, labels)`` batches (uint8 images, int32 labels).

    stream = gcl_tf.benchmarks.permuted(gcl_tf.data.load("digits"), num_tasks=3)
    for task in stream:
        model.fit(task.train)
        print([model.evaluate(t.test, return_dict=True)["accuracy"] for t in stream])

The protocols are those of the CLI (:mod:`gcl_tf.data.protocols`, the ``benchmark`` section of a
config) and the streams too (:mod:`gcl_tf.data.streams`): the same seed gives the same tasks and
the same training order. ``data`` is a dataset from :func:`gcl_tf.data.load` or its name.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from gcl_tf.data.protocols import Batching, Task


class Stream:
    """The tasks of a benchmark, in order (iterate, index or ``len``), with the shape of its
    images (``input_shape``) and its number of classes (``num_classes``)."""

    def __init__(self, benchmark, batch_size: int, eval_batch_size: int, epochs: int, seed: int):
        from gcl_tf.data.streams import task_steps_per_epoch

        self.benchmark = benchmark
        self.input_shape = benchmark.input_shape
        self.num_classes = benchmark.num_classes
        batching = Batching(batch_size, eval_batch_size, epochs, seed)
        self.tasks = [dataclasses.replace(t, batching=batching) for t in benchmark.tasks]
        for task in benchmark.tasks:  # every task has a batch
            task_steps_per_epoch(len(task.train_data), batch_size, task.index)

    def __iter__(self):
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, index) -> Task:
        return self.tasks[index]


def _stream(protocol: str, data, seed: int, batch_size: int, eval_batch_size: int, epochs: int, **keys) -> Stream:
    from gcl_tf.data import ContinualBenchmark, load
    from gcl_tf.data.config import BenchmarkConfig
    from gcl_tf.schema import build_dataclass, check_range

    source = load(data) if isinstance(data, str) else data
    config = build_dataclass(BenchmarkConfig, {"name": protocol, "dataset": source.config.dataset,
                                               "source": source.config.source, **keys}, f"benchmarks.{protocol}")
    for key, value in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size), ("epochs", epochs)):
        check_range(value, (1, None, False, False), f"benchmarks.{protocol}.{key}")
    return Stream(ContinualBenchmark(config, seed, source=source), batch_size, eval_batch_size, epochs, seed)


def permuted(data, num_tasks: int = 20, samples_per_task: Optional[int] = 1000,
             test_samples_per_task: Optional[int] = None, batch_size: int = 10, eval_batch_size: int = 500,
             epochs: int = 1, seed: int = 0, validation_fraction: float = 0.0) -> Stream:
    """Permuted tasks: every task has all classes, its images' pixels shuffled by a fixed
    permutation of its own. ``samples_per_task`` (None: all) training samples per task,
    ``test_samples_per_task`` (None: all) test samples; ``batch_size`` the training batches,
    ``epochs`` passes over each task, ``seed`` the permutations, samples and order,
    ``validation_fraction`` the share of each task's training samples held out as ``task.validation``."""
    return _stream("permuted", data, seed, batch_size, eval_batch_size, epochs, num_tasks=num_tasks,
                   samples_per_task=samples_per_task, test_samples_per_task=test_samples_per_task,
                   validation_fraction=validation_fraction)


def rotated(data, num_tasks: int = 20, max_rotation: float = 180.0, samples_per_task: Optional[int] = 1000,
            test_samples_per_task: Optional[int] = None, batch_size: int = 10, eval_batch_size: int = 500,
            epochs: int = 1, seed: int = 0, validation_fraction: float = 0.0) -> Stream:
    """Rotated tasks: every task has all classes, its images rotated by an angle drawn from
    [0, ``max_rotation``) degrees. Other keywords as :func:`permuted`."""
    return _stream("rotated", data, seed, batch_size, eval_batch_size, epochs, num_tasks=num_tasks,
                   max_rotation=max_rotation, samples_per_task=samples_per_task,
                   test_samples_per_task=test_samples_per_task, validation_fraction=validation_fraction)


def split(data, num_tasks: int = 5, classes_per_task: int = 2, samples_per_task: Optional[int] = None,
          test_samples_per_task: Optional[int] = None, batch_size: int = 10, eval_batch_size: int = 500,
          epochs: int = 1, seed: int = 0, validation_fraction: float = 0.0, class_order: str = "fixed") -> Stream:
    """Class-split tasks: task t has classes [t k, (t + 1) k), k = ``classes_per_task``
    (``task.classes``); ``class_order="random"``: the classes shuffled by ``seed`` first. Other
    keywords as :func:`permuted`."""
    return _stream("split", data, seed, batch_size, eval_batch_size, epochs, num_tasks=num_tasks,
                   classes_per_task=classes_per_task, class_order=class_order, samples_per_task=samples_per_task,
                   test_samples_per_task=test_samples_per_task, validation_fraction=validation_fraction)
