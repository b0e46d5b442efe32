"""BatchNorm statistics for a span of predictions from given images (a method's memory).

A network trained under today's protocol normalises each training batch by its own statistics, of
augmented images (crops, colour jitter, grayscale), and its moving averages of those are what it
normalises test images by; test images are not augmented. :func:`statistics_of` sets every
BatchNorm layer's statistics to those of one pass over given images (e.g. the memory's, stored
unaugmented: no test image is read) for the span of a ``with``, and gives the moving ones back
after, so training goes on from them unchanged.
"""
from __future__ import annotations

import contextlib

import keras
import tensorflow as tf


def batchnorm_layers(network) -> list:
    """Every BatchNorm layer of ``network`` (nested models and blocks included)."""
    return [layer for layer in network._flatten_layers(include_self=False)
            if isinstance(layer, keras.layers.BatchNormalization)]


@contextlib.contextmanager
def statistics_of(network, images):
    """Within it each BatchNorm layer of ``network`` normalises by the mean and variance of its
    inputs over ``images`` [N, ...] (one training-mode pass of the whole batch; nothing else of the
    network changes); at its end the moving statistics come back as they were. With no image or no
    BatchNorm layer it changes nothing. Yields the number of layers set."""
    layers = batchnorm_layers(network)
    saved = [(layer, layer.momentum, tf.identity(layer.moving_mean), tf.identity(layer.moving_variance))
             for layer in layers]
    try:
        if layers and images.shape[0]:
            for layer in layers:
                layer.momentum = 0.0  # the moving statistics become this batch's
            try:
                network(images, training=True)
            finally:
                for layer, momentum, _, _ in saved:
                    layer.momentum = momentum
        yield len(layers) if images.shape[0] else 0
    finally:
        for layer, momentum, mean, variance in saved:
            layer.moving_mean.assign(mean)
            layer.moving_variance.assign(variance)


def test_statistics(network, memory, mode: str):
    """A method's ``test_batchnorm`` (``mode``): ``memory``, :func:`statistics_of` ``network`` over the
    filled slots of ``memory`` (a reservoir: filled slots first); ``moving``, the statistics as they are."""
    if mode != "memory":
        return contextlib.nullcontext()
    return statistics_of(network, memory.images[:int(memory.num_filled.numpy())])
