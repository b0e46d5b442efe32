"""The numpy random streams of the data: one generator per (seed, task, purpose)."""
from __future__ import annotations

import numpy as np


def task_rng(seed: int, task: int, salt: int) -> np.random.Generator:
    """The numpy stream of one purpose (``salt``: :mod:`gcl_tf.salts`) for one task."""
    return np.random.default_rng([seed, task, salt])
