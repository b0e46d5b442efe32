"""tf.data pipelines for the continual streams.

Training: one task's samples, reshuffled every epoch in a fixed order for the seed, in batches
of a fixed size (the last partial batch of an epoch is dropped so the compiled step keeps one
shape), as uint8 images and int32 labels, prefetched. The batches are laid out in stream order
once, so the pipeline only slices (no per-batch work that could stall a cheap step), and the
images stay uint8 until the compiled step converts them (``to_float``: a quarter of the bytes to
move, and on an accelerator the conversion runs there).

Evaluation: ``(images, labels, class_mask, weight)`` where ``class_mask`` [K] marks the classes a
prediction may choose and ``weight`` is 0 for the padding that fills the last batch.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from gcl_tf import salts
from gcl_tf.data.config import IN_STEP_AUGMENTATIONS
from gcl_tf.data.counts import task_steps_per_epoch  # noqa: F401 (re-exported)
from gcl_tf.data.rng import task_rng
from gcl_tf.data.sources import SplitData


def to_float(images):
    """Model input: float32 in [0, 1] (uint8 images are scaled; floats pass through)."""
    if images.dtype == tf.uint8:
        return tf.cast(images, tf.float32) / 255.0
    return tf.cast(images, tf.float32)


def epoch_orders(num_samples: int, epochs: int, seed: int, task_index: int) -> np.ndarray:
    """[epochs * (num_samples // batch)] sample order: one fresh permutation per epoch."""
    rng = task_rng(seed, task_index, salts.ORDER)
    return np.concatenate([rng.permutation(num_samples) for _ in range(epochs)])


def random_flips(images: np.ndarray, seed: int, task_index: int) -> np.ndarray:
    """A copy of ``images`` [N, H, W, C] with each image mirrored left-right with probability 1/2,
    drawn from the seed and the task (the same stream every run)."""
    flip = task_rng(seed, task_index, salts.FLIP).random(len(images)) < 0.5
    out = images.copy()
    out[flip] = out[flip][:, :, ::-1]
    return out


def train_dataset(data: SplitData, batch_size: int, epochs: int, seed: int, task_index: int,
                  augment: str = "none") -> tuple[tf.data.Dataset, int]:
    """All epochs of one task's training stream and the number of steps per epoch.

    The stream depends on the seed and the task only, so a resumed task skips the batches done
    (``dataset.skip``, gcl_tf/task_loop.py) and sees the rest of the same stream. ``augment="flip"``
    mirrors each sample of the stream with probability 1/2 (every epoch draws anew), before the
    model sees it; an in-step set (``"ocl"``, ``"crop_flip"``) leaves the stream as read (the model
    augments inside its step).
    """
    n = len(data)
    steps_per_epoch = task_steps_per_epoch(n, batch_size, task_index)
    per_epoch = []
    orders = epoch_orders(n, epochs, seed, task_index).reshape(epochs, n)
    for order in orders:  # drop each epoch's partial batch
        per_epoch.append(order[: steps_per_epoch * batch_size])
    order = np.concatenate(per_epoch)
    images = data.images[order]  # [epochs * steps * B, ...] uint8, in stream order
    if augment == "flip":
        images = random_flips(images, seed, task_index)
    elif augment not in IN_STEP_AUGMENTATIONS:  # ocl: the model augments inside its step
        raise ValueError(f"unknown augmentation {augment!r}")
    images = images.reshape((-1, batch_size) + data.images.shape[1:])  # [batches, B, ...]
    labels = data.labels[order].astype(np.int32).reshape(-1, batch_size)
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    return ds.prefetch(tf.data.AUTOTUNE), steps_per_epoch


def eval_arrays(data: SplitData, class_mask: np.ndarray, batch_size: int):
    """Padded numpy arrays for evaluation: a whole number of batches, padding weighted 0."""
    n = len(data)
    padded = -(-n // batch_size) * batch_size
    pad = padded - n
    images = np.concatenate([data.images, np.zeros((pad,) + data.images.shape[1:], np.uint8)])
    labels = np.concatenate([data.labels, np.zeros(pad, np.int64)]).astype(np.int32)
    weights = np.concatenate([np.ones(n, np.float32), np.zeros(pad, np.float32)])
    # float, not bool: Keras averages a first batch over replicas to build a distributed model
    masks = np.broadcast_to(class_mask.astype(np.float32), (padded, class_mask.shape[0]))
    return images, labels, masks, weights


def eval_dataset(data: SplitData, class_mask: np.ndarray, batch_size: int) -> tf.data.Dataset:
    images, labels, masks, weights = eval_arrays(data, class_mask, batch_size)
    ds = tf.data.Dataset.from_tensor_slices((images, labels, masks, weights)).batch(batch_size, drop_remainder=True)
    return ds.prefetch(tf.data.AUTOTUNE)
