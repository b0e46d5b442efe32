"""Analytic FLOPs of GCL's training step and evaluation (the GEMMs and convolutions), and the GEMMs
of its step with a Dense trunk, in the step's shapes (timed alone by
:func:`gcl_tf.benchmark.flops.time_gemms`: the step's ceiling)."""
from __future__ import annotations

from gcl_tf.benchmark.flops import layer_flops, training_flops


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
