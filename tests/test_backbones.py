"""The backbones: the fused BatchNorm against Keras's own, and the ConvNet's shapes."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import pytest
import tensorflow as tf

from gcl_tf import backbones


def twin_layers(shape):
    fused = backbones.FusedBatchNormalization(**backbones.BN)
    plain = keras.layers.BatchNormalization(**backbones.BN)
    for layer in (fused, plain):
        layer.build(shape)
    rng = np.random.default_rng(0)
    for name in ("gamma", "beta", "moving_mean", "moving_variance"):
        value = rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32)
        getattr(fused, name).assign(value)
        getattr(plain, name).assign(value)
    return fused, plain


def test_fused_batchnorm_matches_keras_in_training_and_inference():
    """Same outputs and gradients (input, gamma, beta) as keras.layers.BatchNormalization, the same
    moving mean, and the moving variance updated with the unbiased batch variance."""
    shape = (6, 5, 4, 3)
    fused, plain = twin_layers(shape)
    x = tf.constant(np.random.default_rng(1).normal(2.0, 3.0, shape).astype(np.float32))
    results = []
    for layer in (fused, plain):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(y * tf.range(y.shape[-1], dtype=tf.float32) + y ** 2)
        grads = tape.gradient(loss, [x, layer.gamma, layer.beta])
        assert all(g is not None for g in grads)
        results.append((y.numpy(), [g.numpy() for g in grads]))
    (y_fused, g_fused), (y_plain, g_plain) = results
    np.testing.assert_allclose(y_fused, y_plain, rtol=1e-4, atol=1e-5)
    for a, b in zip(g_fused, g_plain):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(fused.moving_mean.numpy(), plain.moving_mean.numpy(), rtol=1e-6)
    n = np.prod(shape[:-1])
    batch_var = x.numpy().reshape(-1, shape[-1]).var(axis=0)  # biased
    start = twin_layers(shape)[0].moving_variance.numpy()
    np.testing.assert_allclose(fused.moving_variance.numpy(), 0.9 * start + 0.1 * batch_var * n / (n - 1), rtol=1e-5)
    np.testing.assert_allclose(plain.moving_variance.numpy(), 0.9 * start + 0.1 * batch_var, rtol=1e-5)
    # inference: the moving statistics (set equal first)
    fused.moving_variance.assign(plain.moving_variance)
    np.testing.assert_allclose(fused(x, training=False).numpy(), plain(x, training=False).numpy(), rtol=1e-5, atol=1e-5)


def test_fused_batchnorm_falls_back_to_keras_off_its_path():
    """A 2-D input takes Keras's own computation (the fused kernel is for 4-D channels-last)."""
    fused, plain = twin_layers((7, 3))
    x = tf.constant(np.random.default_rng(2).normal(size=(7, 3)).astype(np.float32))
    np.testing.assert_allclose(fused(x, training=True).numpy(), plain(x, training=True).numpy(), rtol=1e-6)


def test_convnet_convolutions_have_no_bias_before_batchnorm():
    net = backbones.convnet((32, 32, 3))
    convs = [layer for layer in net.layers if isinstance(layer, keras.layers.Conv2D)]
    assert len(convs) == 6 and all(not conv.use_bias for conv in convs)
    assert net.output_shape == (None, 256)
    assert sum(isinstance(layer, backbones.FusedBatchNormalization) for layer in net.layers) == 6


def test_convnet_is_the_authors_encoder():
    """Max-pools after conv 2, 4, 5 and 6 (32 -> 16 -> 8 -> 4 -> 2), Kaiming-normal convolutions
    (fan_in, untruncated: std sqrt(2 / fan_in)), 64 x 2 x 2 features."""
    net = backbones.convnet((32, 32, 3))
    sizes = {layer.name: layer.output.shape[1] for layer in net.layers if isinstance(layer, keras.layers.Conv2D)}
    assert sizes == {"conv1": 32, "conv2": 32, "conv3": 16, "conv4": 16, "conv5": 8, "conv6": 4}
    pools = [layer.name for layer in net.layers if isinstance(layer, keras.layers.MaxPooling2D)]
    assert pools == ["pool_conv2", "pool_conv4", "pool_conv5", "pool_conv6"]
    assert net.output_shape == (None, 256)
    # conv1: fan_in 3 * 3 * 3 = 27, fan_out 3 * 3 * 64 = 576, so its std tells fan_in (0.272) from
    # fan_out (0.059) and fan_avg (0.081); 1,728 weights put the sample std within ~0.005 of it
    first = np.asarray(net.get_layer("conv1").kernel)
    assert first.shape == (3, 3, 3, 64)
    assert abs(first.std() - np.sqrt(2.0 / 27)) < 0.02
    kernel = np.asarray(net.get_layer("conv3").kernel)  # 36,864 weights, std sqrt(2 / 576)
    assert abs(kernel.std() - np.sqrt(2.0 / 576)) < 0.003
    assert np.abs(kernel).max() > 3.5 * np.sqrt(2.0 / 576)  # untruncated: tails beyond 2 std exist


def _dense_and_convs(method):
    return {id(layer): layer for layer in method._flatten_layers(include_self=False, recursive=True)
            if isinstance(layer, (keras.layers.Dense, keras.layers.Conv2D))}.values()


@pytest.mark.parametrize("name,backbone,shape", [("er", "resnet18", (32, 32, 3)), ("gcl", "convnet", (32, 32, 3)),
                                                 ("er", "mlp", (8, 8, 1))])
def test_torch_initializer_draws_pytorchs_default_where_keras_default_was(name, backbone, shape):
    """``model.initializer: torch``: every Dense and Conv2D that kept Keras's default (Glorot uniform,
    zero bias) is re-drawn as PyTorch's nn.Linear / nn.Conv2d default, U(+-1/sqrt(fan_in)) for the
    kernel and the bias; the ConvNet's Kaiming-normal convolutions (the authors' choice) keep theirs."""
    from gcl_tf import config as config_lib
    from gcl_tf import methods

    built = {}
    for init in ("keras", "torch"):
        config = config_lib.resolve({"method": {"name": name}, "model": {"backbone": backbone, "initializer": init}})
        keras.utils.set_random_seed(0)
        built[init] = {layer.path: layer for layer in _dense_and_convs(methods.build(config, shape, 10))}
    assert built["keras"].keys() == built["torch"].keys()
    redrawn = 0
    for path, layer in built["torch"].items():
        before = built["keras"][path]
        kernel = layer.kernel.numpy()
        if type(before.kernel_initializer) is not keras.initializers.GlorotUniform:  # Kaiming: untouched
            np.testing.assert_array_equal(kernel, before.kernel.numpy())
            continue
        redrawn += 1
        bound = 1.0 / np.sqrt(np.prod(kernel.shape[:-1]))
        assert np.abs(kernel).max() <= bound
        assert np.std(kernel) == pytest.approx(bound / np.sqrt(3), rel=0.2 if kernel.size < 100 else 0.05)
        if layer.use_bias:
            bias = layer.bias.numpy()
            assert np.abs(bias).max() <= bound and np.any(bias != 0)
            assert not np.any(before.bias.numpy())  # Keras's zero bias
    # ResNet-18: stem, 16 block convolutions, 3 shortcuts, the logits; ConvNet: GCL's 4 heads and its own
    # head (own_latent, a default); MLP: 2 + logits.
    assert redrawn == {"resnet18": 21, "convnet": 5, "mlp": 3}[backbone]
