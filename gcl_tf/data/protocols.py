"""Continual protocols (as in GEM): permuted, rotated and class-split task sequences.

Pure NumPy, deterministic for a seed. Each task holds its training samples, an optional
validation split carved out of them, and its test samples (loaded only when asked for).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Optional

import numpy as np

from gcl_tf import salts
from gcl_tf.data.counts import task_steps_per_epoch, validation_count  # noqa: F401 (re-exported)
from gcl_tf.data.known import check_augment, check_sizes
from gcl_tf.data.rng import task_rng
from gcl_tf.data.sources import SplitData, make_source
from gcl_tf.errors import ConfigError


def random_permutation(num_pixels: int, rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(num_pixels)


def apply_permutation(images: np.ndarray, permutation: np.ndarray) -> np.ndarray:
    """Permute the pixels of every image (all channels of an image flattened together)."""
    n = images.shape[0]
    return images.reshape(n, -1)[:, permutation].reshape(images.shape)


def rotate_images(images: np.ndarray, degrees: float) -> np.ndarray:
    """Rotate every image [N, H, W, C] by ``degrees`` counter-clockwise about its centre, as GEM's
    ``mnist_rotations.py`` does: PIL's ``Image.rotate`` with its default (nearest-neighbour)
    resampling, corners filled with 0 (each channel as a greyscale image)."""
    from PIL import Image

    out = np.empty_like(images)
    for i, image in enumerate(images):
        for c in range(image.shape[-1]):
            out[i, ..., c] = np.asarray(Image.fromarray(np.ascontiguousarray(image[..., c])).rotate(degrees))
    return out


def rotation_angle(task: int, num_tasks: int, max_rotation: float, rng: np.random.Generator) -> float:
    """Task ``task``'s angle, uniform in ``[task R / T, (task + 1) R / T)`` for ``R = max_rotation``:
    angles rise with the task and neighbouring tasks look alike (GEM's ``mnist_rotations.py``)."""
    low, high = task * max_rotation / num_tasks, (task + 1) * max_rotation / num_tasks
    return float(low + rng.random() * (high - low))


def class_order(num_classes: int, order: str = "fixed", seed: int = 0) -> np.ndarray:
    """[K] the classes in the order the split protocol deals them to its tasks: ``fixed``, by index;
    ``random``, a permutation drawn from ``seed`` alone (one per seed, whatever else the run does)."""
    if order == "fixed":
        return np.arange(num_classes)
    return task_rng(seed, 0, salts.CLASS_ORDER).permutation(num_classes)


def split_classes(num_classes: int, num_tasks: int, classes_per_task: int, order: str = "fixed",
                  seed: int = 0) -> list[np.ndarray]:
    """Class groups: task t gets classes ``class_order[t * k:(t + 1) * k]`` (fixed order: [t k, (t + 1) k))."""
    if num_tasks * classes_per_task > num_classes:
        raise ConfigError(
            f"benchmark: {num_tasks} tasks x {classes_per_task} classes need {num_tasks * classes_per_task} "
            f"classes but the data has {num_classes}; allowed: num_tasks * classes_per_task <= {num_classes}"
        )
    ordered = class_order(num_classes, order, seed)
    return [ordered[t * classes_per_task:(t + 1) * classes_per_task] for t in range(num_tasks)]


class Batching(NamedTuple):
    """How a stream of :mod:`gcl_tf.benchmarks` batches its tasks."""

    batch_size: int
    eval_batch_size: int
    epochs: int
    seed: int


@dataclass
class Task:
    """One task of a continual stream: its index, the classes its samples come from, a
    description, its samples (``train_data``, ``validation_data``, ``test_data``: arrays) and the
    protocol's transform. A task of a :mod:`gcl_tf.benchmarks` stream also has its ``batching``,
    and with it ``train``, ``test`` and ``validation``: ``tf.data.Dataset`` of ``(images,
    labels)`` batches (the training ones in stream order, all epochs)."""

    index: int
    classes: np.ndarray  # [k] label ids the task's samples come from
    description: str
    train_data: SplitData
    validation_data: Optional[SplitData] = None
    test_data: Optional[SplitData] = None
    transform: dict = field(default_factory=dict)
    batching: Optional[Batching] = None

    def eval_data(self, split: str) -> SplitData:
        data = self.test_data if split == "test" else self.validation_data
        if data is None:
            raise ValueError(f"task {self.index} has no {split} split")
        return data

    @property
    def train(self):
        from gcl_tf.data.streams import train_dataset

        b = self._batching()
        return train_dataset(self.train_data, b.batch_size, b.epochs, b.seed, self.index)[0]

    @property
    def test(self):
        return self._eval_dataset("test")

    @property
    def validation(self):
        """The task's validation batches: samples held out of its training data (the stream's
        ``validation_fraction``); for tuning, so that the test split is never read."""
        if self.validation_data is None:
            raise ValueError(f"task {self.index} has no validation split: pass validation_fraction > 0 "
                             "to the stream (e.g. gcl_tf.benchmarks.split(data, validation_fraction=0.1))")
        return self._eval_dataset("validation")

    def _batching(self) -> Batching:
        if self.batching is None:
            raise ValueError(f"task {self.index} is not batched: a task of a gcl_tf.benchmarks stream is; "
                             "its arrays are train_data, validation_data and test_data")
        return self.batching

    def _eval_dataset(self, split_name):
        import tensorflow as tf

        split = self.eval_data(split_name)
        return tf.data.Dataset.from_tensor_slices((split.images, split.labels.astype(np.int32))).batch(
            self._batching().eval_batch_size)


class ContinualBenchmark:
    """A sequence of tasks built from a source, following one protocol.

    ``load_test=False`` never reads the source's test split (tuning on validation data);
    ``source``: the images (default: the source ``config`` names).
    """

    def __init__(self, config, seed: int, load_test: bool = True, source=None):
        self.config = config
        self.seed = seed
        self.source = make_source(config) if source is None else source
        train = self.source.load("train")
        test = self.source.load("test") if load_test else None
        self.num_classes = self.source.num_classes
        self.input_shape = tuple(int(d) for d in train.images.shape[1:])
        test_count = len(test) if test is not None else 0
        check_augment(config, self.input_shape)
        check_sizes(config, self.input_shape, len(train), test_count, self.num_classes)  # before the tasks
        self.tasks = self._build(train, test)

    # ----------------------------------------------------------------------------------------
    def class_mask(self, task: Task) -> np.ndarray:
        """[K] bool: the classes a prediction may choose (all of them when single-head)."""
        mask = np.zeros(self.num_classes, dtype=bool)
        if self.config.multi_head:
            mask[task.classes] = True
        else:
            mask[:] = True
        return mask

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    # ----------------------------------------------------------------------------------------
    def _choose(self, candidates: np.ndarray, count: Optional[int], rng, what: str) -> np.ndarray:
        if count is None:
            return rng.permutation(candidates)
        if count > len(candidates):
            raise ConfigError(
                f"benchmark.{what}: {count} is more than the {len(candidates)} samples available; "
                f"allowed: at most {len(candidates)} or null"
            )
        return rng.choice(candidates, size=count, replace=False)

    def _build(self, train: SplitData, test: Optional[SplitData]) -> list[Task]:
        c = self.config
        if c.name == "split":
            groups = split_classes(self.num_classes, c.num_tasks, c.classes_per_task, c.class_order, self.seed)
        else:
            groups = [np.arange(self.num_classes)] * c.num_tasks
        tasks = []
        chosen_tasks = range(len(groups)) if c.tasks is None else c.tasks
        for t in chosen_tasks:  # each task's data is keyed on (seed, t): the others need not be built
            classes = groups[t]
            transform_rng = task_rng(self.seed, t, salts.TRANSFORM)
            if c.name == "permuted":
                permutation = random_permutation(int(np.prod(self.input_shape)), transform_rng)
                transform = {"permutation": permutation}
                apply = lambda images, p=permutation: apply_permutation(images, p)
                description = "permuted"
            elif c.name == "rotated":
                angle = rotation_angle(t, c.num_tasks, c.max_rotation, transform_rng)
                transform = {"rotation_degrees": angle}
                apply = lambda images, a=angle: rotate_images(images, a)
                description = f"rotated {angle:.1f} degrees"
            else:
                transform = {}
                apply = lambda images: images
                description = "classes " + ", ".join(str(int(k)) for k in classes)

            train_candidates = np.flatnonzero(np.isin(train.labels, classes))
            chosen = self._choose(train_candidates, c.samples_per_task, task_rng(self.seed, t, salts.TRAIN),
                                  "samples_per_task")
            validation = None
            if c.validation_fraction > 0:
                n_val = validation_count(c.validation_fraction, len(chosen))
                if n_val >= len(chosen):
                    raise ConfigError(
                        f"benchmark.validation_fraction: {c.validation_fraction} leaves no training samples "
                        f"in task {t} ({len(chosen)} samples)"
                    )
                order = task_rng(self.seed, t, salts.VALIDATION).permutation(len(chosen))
                val_index, chosen = chosen[order[:n_val]], chosen[order[n_val:]]
                val = train.subset(np.sort(val_index))
                validation = SplitData(apply(val.images), val.labels)
            tr = train.subset(chosen)
            task_train = SplitData(apply(tr.images), tr.labels)

            task_test = None
            if test is not None:
                test_candidates = np.flatnonzero(np.isin(test.labels, classes))
                if c.test_samples_per_task is None:
                    test_index = test_candidates
                else:
                    test_index = np.sort(
                        self._choose(test_candidates, min(c.test_samples_per_task, len(test_candidates)),
                                     task_rng(self.seed, t, salts.TEST), "test_samples_per_task")
                    )
                te = test.subset(test_index)
                task_test = SplitData(apply(te.images), te.labels)
            tasks.append(Task(t, np.asarray(classes), description, task_train, validation, task_test, transform))
        return tasks
