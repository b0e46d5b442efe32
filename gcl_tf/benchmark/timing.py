"""Timing for the speed benchmarks: medians of repeated wall times, variants timed in turns (one
call of each per round), the dense float32 matmul every speed is reported as a fraction of, and
the CPU the times were taken on."""
from __future__ import annotations

import re
import time

import numpy as np

MATMUL_SIZE = 1024


def interleaved_seconds(fns: dict, rounds: int, warmup: int = 1) -> dict:
    """Median wall time of each ``fns[key]()``, timed in turns (one call of each per round), so
    that the machine's drift within a run (clock, neighbours) falls on every variant alike and
    their ratios hold."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {key: [] for key in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return {key: float(np.median(values)) for key, values in times.items()}


def median_seconds(fn, repeats: int, warmup: int = 2) -> float:
    """Median wall time of ``fn()`` (which must block until its work is done)."""
    return interleaved_seconds({"fn": fn}, repeats, warmup)["fn"]


class MatmulReference:
    """The dense matmul every speed is a fraction of, timed in turns with what it is compared to:
    on a shared machine the clock and the neighbours drift within one run (the matmul's own rate
    can double between rows), so a rate taken once at the start, or even just before a row, can
    be far from the conditions the row ran in."""

    def __init__(self, repeats: int, size: int = MATMUL_SIZE):
        import tensorflow as tf

        a = tf.random.stateless_normal([size, size], seed=[1, 2])
        b = tf.random.stateless_normal([size, size], seed=[3, 4])
        self._product = tf.function(lambda: tf.matmul(a, b))
        self.flops = 2.0 * size ** 3
        self.repeats = max(10, repeats)
        self.rates: list[float] = []

    def matmul(self) -> None:
        self._product().numpy()

    def rate(self, seconds: float) -> float:
        """GFLOP/s of a matmul that took ``seconds`` (recorded for the report)."""
        self.rates.append(self.flops / seconds / 1e9)
        return self.rates[-1]

    def __call__(self) -> float:
        return self.rate(median_seconds(self.matmul, self.repeats))

    def paired(self, fn, rounds: int) -> tuple[float, float]:
        """Median seconds of ``fn()`` and the matmul's GFLOP/s, one of each per round."""
        times = interleaved_seconds({"fn": fn, "matmul": self.matmul}, rounds)
        return times["fn"], self.rate(times["matmul"])


def cpu_model() -> dict:
    """The CPU's model name and its vector extensions (what decides TensorFlow's oneDNN default)."""
    try:
        with open("/proc/cpuinfo") as handle:
            text = handle.read()
    except OSError:
        return {}
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    wanted = sorted(f for f in (flags.group(1).split() if flags else [])
                    if f.startswith(("avx", "amx", "fma")))
    return {"model": model.group(1).strip() if model else "", "vector_flags": wanted}
