"""Analytic FLOPs of the steps the speed benchmarks time (GCL's training step and evaluation, a
classifier's step), and the GEMMs of GCL's step with a Dense trunk, timed alone (its ceiling)."""
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


def gcl_step_flops(model, batch: int) -> float:
    """Analytic FLOPs of one GCL training step (the GEMMs and convolutions)."""
    k, T, H, K = model.num_contexts, batch, model.hidden_size, model.num_classes
    rows = k + T
    trunk, first = layer_flops(model.trunk, rows)
    feature = model.trunk.output_shape[-1]
    heads = 2 * 2.0 * rows * feature * H
    kernel = 2.0 * rows * rows * H  # the edge logits between all images
    aggregate = 2.0 * rows * k * (H + K)  # graph @ [latents, one-hot labels]
    label_code = 2.0 * rows * K * H
    output = 2.0 * rows * 2 * H * K
    forward = trunk + heads + kernel + aggregate + label_code + output
    return training_flops(forward, first)


def gcl_step_gemms(model, batch: int):
    """The GEMMs of one GCL training step with a Dense trunk, forward and backward, in the step's
    shapes: ``(m, k, n, transpose_a, transpose_b)`` per product of an [m, k] and a [k, n] matrix.
    None for a trunk with other layers (convolutions)."""
    import keras

    k, T, H, K = model.num_contexts, batch, model.hidden_size, model.num_classes
    R = k + T
    gemms = []

    def dense(a, b, rows, input_gradient=True):  # X [rows, a] @ W [a, b], dW = X^T dY, dX = dY W^T
        gemms.extend([(rows, a, b, False, False), (a, rows, b, True, False)])
        if input_gradient:
            gemms.append((rows, b, a, False, True))

    first = True
    for layer in model.trunk._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.Dense):
            dense(*layer.kernel.shape, R, input_gradient=not first)
            first = False
        elif layer.weights:
            return None
    feature = model.trunk.output_shape[-1]
    dense(feature, H, R)  # edge head
    dense(feature, H, R)  # latent head
    factors, width = H + 2, H + K + 1
    gemms += [(R, factors, k, False, True), (R, k, factors, False, False), (k, R, factors, True, False),  # log k
              (R, factors, T, False, True)]  # to the targets (edge memory, no gradient)
    gemms += [(R, k, width, False, False), (R, width, k, False, True), (k, R, width, True, False)]  # aggregate
    dense(K, H, R)  # label encoder on the label histogram
    dense(2 * H, K, R)  # output head
    return gemms


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


def gcl_eval_flops(model, images: int, samples: int, context_passes: int = 1) -> float:
    """Analytic FLOPs of predicting ``images`` test images with ``samples`` graph samples, the
    memory's M images embedded ``context_passes`` times (once per evaluation, or once per batch)."""
    M, H, K = model.capacity, model.hidden_size, model.num_classes
    feature = model.trunk.output_shape[-1]

    def embed(n):
        return layer_flops(model.trunk, n)[0] + 2 * 2.0 * n * feature * H

    kernel = 2.0 * images * M * H
    per_sample = 2.0 * images * M * (H + K) + 2.0 * images * K * H + 2.0 * images * 2 * H * K
    return context_passes * embed(M) + embed(images) + kernel + samples * per_sample

