"""How many steps and samples a task has: plain arithmetic, no TensorFlow (the checks before it
loads and the streams use the same rules)."""
from __future__ import annotations

from gcl_tf.errors import ConfigError


def task_steps_per_epoch(num_samples: int, batch_size: int, task_index: int) -> int:
    """Training steps per epoch of a task (partial batches are dropped); a ConfigError if none
    (checked before TensorFlow loads when the task's size is known: gcl_tf/prechecks.py)."""
    steps = num_samples // batch_size
    if steps == 0:
        raise ConfigError(
            f"train.batch_size: {batch_size} is more than the {num_samples} training samples of task {task_index}; "
            f"allowed: at most {num_samples}, or raise benchmark.samples_per_task"
        )
    return steps


def validation_count(fraction: float, samples: int) -> int:
    """How many of a task's ``samples`` training samples its validation split takes (at least one)."""
    return max(1, int(round(fraction * samples)))
