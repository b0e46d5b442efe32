"""How far apart each trunk puts GCL's edge embeddings at initialisation (issue 22; docs/gcl/extensions.md).

For 250 training images per dataset (training mode, seeds 0 and 1): the median squared distance
between edge embeddings over the first 10 (what kernel_width: median sees at its first step) and
over all 250, its 10% and 90% quantiles, and the edge probability a median pair starts at with
width 1 and with the authors' sqrt(256) = 16.

    python docs/results/kernel_width/embedding_scale.py   # needs data/cifar10.npz and Fashion-MNIST
"""
import numpy as np

import gcl_tf
from gcl_tf.backbones import convnet, mlp, resnet18


def cnn(shape):
    import keras

    return keras.Sequential([keras.Input(shape), keras.layers.Conv2D(64, 3, activation="relu"),
                             keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.Flatten()])


def images(source, n=250):
    x = source.load("train").images
    x = x[np.random.RandomState(0).choice(len(x), n, replace=False)].astype("float32") / 255.0
    return x[..., None] if x.ndim == 3 else x


def main():
    import keras
    import tensorflow as tf

    from gcl_tf.methods.gcl.graph import median_squared_distance

    digits = gcl_tf.data.load("digits")
    fashion = gcl_tf.data.load("fashion_mnist", source="idx", path="/usr/share/datasets/fashion-mnist")
    cifar = gcl_tf.data.load("cifar10", source="npz", path="data/cifar10.npz")
    trunks = {"mlp": lambda s: mlp(s, 256), "cnn": cnn, "convnet": convnet, "resnet18": resnet18}
    for name, source, trunk in [("mlp-digits", digits, "mlp"), ("cnn-digits", digits, "cnn"),
                                ("mlp-fashion", fashion, "mlp"), ("cnn-cifar10", cifar, "cnn"),
                                ("convnet-cifar10", cifar, "convnet"), ("resnet18-cifar10", cifar, "resnet18")]:
        x = images(source)
        for seed in (0, 1):
            keras.utils.set_random_seed(seed)
            model = gcl_tf.GCL(backbone=trunks[trunk](x.shape[1:]), num_classes=10, memory_size=250,
                               input_shape=x.shape[1:])
            u, _ = model.embed(tf.constant(x), training=True)
            first = float(median_squared_distance(u[:10], tf.ones(10, bool)))
            d2 = tf.reduce_sum((u[:, None] - u[None]) ** 2, -1).numpy()[np.triu_indices(len(x), 1)]
            median = float(np.median(d2))
            print(f"{name:17s} seed {seed}: median of the first 10 {first:8.3g}, of 250 {median:8.3g}, "
                  f"10% {np.quantile(d2, .1):8.3g}, 90% {np.quantile(d2, .9):8.3g}; a median pair's edge "
                  f"at width 1 {np.exp(-.5 * median):.3g}, at 16 {np.exp(-.5 * median / 16):.3g}", flush=True)


if __name__ == "__main__":
    main()
