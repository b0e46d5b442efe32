"""Analytic FLOPs for the speed benchmarks: a Keras model's Dense and Conv2D layers, forward and
backward (a method's own count, e.g. GCL's step and evaluation, is its speed checks':
gcl_tf/speed/), and a list of GEMMs timed alone, back to back (a step's ceiling)."""
from __future__ import annotations

from gcl_tf.benchmark.timing import median_seconds


def layer_flops(model, batch: int) -> tuple[float, float]:
    """Forward FLOPs of a Keras model's Dense and Conv2D layers for ``batch`` inputs, and those of
    its first such layer (whose input gradient a training step does not need)."""
    import keras

    total, first = 0.0, None
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.Dense):
            flops = 2.0 * layer.kernel.shape[0] * layer.kernel.shape[1]
        elif isinstance(layer, keras.layers.Conv2D):
            kh, kw, cin, cout = layer.kernel.shape
            out_h, out_w = layer.output.shape[1:3]
            flops = 2.0 * kh * kw * cin * cout * out_h * out_w
        else:
            continue
        flops *= batch
        total += flops
        if first is None:
            first = flops
    return total, (first or 0.0)


def training_flops(forward: float, first_layer: float) -> float:
    """Forward + backward: the backward pass computes weight and input gradients (twice the
    forward's multiply-adds), except the input gradient of the first layer."""
    return 3.0 * forward - first_layer


def time_gemms(gemms, repeats: int, reference=None):
    """Median seconds of running ``gemms`` one after another (each waits for the previous, as in
    the step) in one tf.function, on random operands passed in (nothing constant-folds); with a
    ``reference``, ``(seconds, matmul GFLOP/s timed in turns)``."""
    import tensorflow as tf

    operands = []
    for i, (m, k, n, ta, tb) in enumerate(gemms):
        a = tf.random.stateless_normal([k, m] if ta else [m, k], seed=[i, 1])
        b = tf.random.stateless_normal([n, k] if tb else [k, n], seed=[i, 2])
        operands.append((a, b))
    flags = [(ta, tb) for *_, ta, tb in gemms]

    @tf.function
    def run(operands):
        outputs, previous = [], []
        for (a, b), (ta, tb) in zip(operands, flags):
            with tf.control_dependencies(previous):
                out = tf.matmul(a, b, transpose_a=ta, transpose_b=tb)
            outputs.append(out)
            previous = [out]
        return outputs

    def once():
        return [o.shape for o in run(operands)]

    if reference is None:
        return median_seconds(once, repeats)
    once()  # trace
    return reference.paired(once, repeats)
