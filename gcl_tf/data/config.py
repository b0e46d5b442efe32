"""The ``benchmark`` section of a run's config: which data, which continual protocol. Declared
next to the data it describes (as each method declares its keys in its own module) and checked
by :mod:`gcl_tf.schema`; :mod:`gcl_tf.config` puts it in the whole run's config."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from gcl_tf.errors import ConfigError
from gcl_tf.schema import value_range


@dataclass
class BenchmarkConfig:
    """Which data, which continual protocol."""

    name: Literal["permuted", "rotated", "split"] = "permuted"
    # Dataset name: a TFDS name for source=tfds (mnist, fashion_mnist, cifar10, cifar100,
    # svhn_cropped); a label for the other sources.
    dataset: str = "mnist"
    source: Literal["tfds", "idx", "npz", "folder", "digits"] = "tfds"
    # idx: folder with MNIST-format files; npz: a .npz file; folder: a root with train/ and test/;
    # tfds: optional TFDS data_dir.
    path: Optional[str] = None
    num_tasks: int = field(default=20, metadata=value_range(1))
    # The protocol's tasks this run learns, by index (0 .. num_tasks - 1), in the order given
    # (null: all of them). Task t is the same data whichever tasks run with it, so a stream can be
    # learned in parts: tasks [0, 1] now, and later, from that run's learner (init_from), [2, 3].
    tasks: Optional[list[int]] = None
    # Training samples drawn per task (null: all the task's training samples).
    samples_per_task: Optional[int] = field(default=1000, metadata=value_range(1))
    # Test samples per task (null: the task's whole test split).
    test_samples_per_task: Optional[int] = field(default=None, metadata=value_range(1))
    classes_per_task: int = field(default=2, metadata=value_range(1))
    # split: which classes each task holds. fixed: task t has classes [t k, (t + 1) k) (the GCL paper's
    # order); random: the classes shuffled by the run's seed first (one order per seed, the same on
    # --resume and for any benchmark.tasks; the re-runs of today's protocol), results.json's task_classes.
    class_order: Literal["fixed", "random"] = "fixed"
    # Number of classes (null: inferred from the source).
    num_classes: Optional[int] = field(default=None, metadata=value_range(2))
    # Multi-head (task-aware test): predictions restricted to the task's classes.
    multi_head: bool = False
    # Fraction of each task's training samples held out as its validation split.
    validation_fraction: float = field(default=0.0, metadata=value_range(0.0, 1.0, hi_open=True))
    # Rotated protocol: task t's angle is drawn uniformly from [t R / T, (t + 1) R / T) degrees,
    # R = max_rotation, T = num_tasks (rising angles, as GEM builds Rotated MNIST).
    max_rotation: float = field(default=180.0, metadata=value_range(0.0, 360.0, lo_open=True))
    # Resize images to image_size x image_size (folder source; null keeps the native size).
    image_size: Optional[int] = field(default=None, metadata=value_range(1))
    # The folder source's colours: rgb (3 channels) or grayscale (1); null: the images' own, as
    # ``python -m gcl_tf.data to-npz`` decides (grayscale when every image has one channel, rgb when
    # every one has colour, a mix an error), settled when the config is read (settle_color_mode).
    color_mode: Optional[Literal["rgb", "grayscale"]] = None
    # Training-time augmentation, never at test time. flip: a random horizontal flip of each
    # training image in the stream, before the model (so a memory stores the flipped copy: the
    # paper's Split CIFAR10 / SVHN / CIFAR100 / MiniImageNet loaders); ocl: today's online-CL
    # protocol, random resized crop, flip, colour jitter and grayscale applied inside the step to
    # the incoming and the replayed images alike, the memory keeping them raw (gcl_tf/augment.py;
    # the methods with augments_in_step); crop_flip: ocl's crop and flip alone, no colour step (a
    # diagnostic, not a published protocol); pad_crop_flip: a crop of the image padded with 4 zeros, and
    # the flip, in the step (CCL-DC's set for DER++ and ER-ACE); none: as read.
    augment: Literal["none", "flip", "ocl", "crop_flip", "pad_crop_flip"] = "none"


#: The ``augment`` values the model applies inside its step (gcl_tf/augment.py); ``flip`` is the
#: stream's own. One list for the stream, the method's keyword and the augmentation module.
IN_STEP_AUGMENTATIONS = ("none", "ocl", "crop_flip", "pad_crop_flip")


def require_in_step_augmentation(augment: str, what: str, instead: str) -> None:
    """A ConfigError unless ``augment`` is an in-step augmentation other than ``none``: a method's
    key that draws views from it (``what`` it does, and ``instead``, the key's value that needs none)."""
    in_step = [name for name in IN_STEP_AUGMENTATIONS if name != "none"]
    if augment not in in_step:
        raise ConfigError(f"{what}, and benchmark.augment is {augment!r}; allowed: {instead}, or benchmark.augment: "
                          f"{', '.join(in_step)}")


def settle_color_mode(benchmark: BenchmarkConfig) -> Optional[str]:
    """``benchmark.color_mode`` as the data will be read (what a run's saved config records): as
    given; null: for the folder source its images' own (gcl_tf.data.files.folder_color_mode; null
    while its folder does not exist, which the run reports), ``rgb`` for the other sources, which
    do not read it (the value configs saved before null was allowed hold)."""
    import os

    if benchmark.color_mode is not None:
        return benchmark.color_mode
    if benchmark.source != "folder":
        return "rgb"
    if not benchmark.path or not os.path.isdir(benchmark.path):
        return None
    from gcl_tf.data.files import folder_color_mode

    return folder_color_mode(benchmark.path)
