"""Feature extractors: the MLP, the paper's 6-layer ConvNet and GEM's reduced ResNet-18.

Each returns a ``keras.Model`` mapping images ``[N, H, W, C]`` to non-negative features ``[N, D]``
(the last operation is a ReLU or a pooling of ReLUs). Classifiers and GCL's heads go on top.
BatchNorm uses PyTorch's momentum (0.1, Keras ``momentum=0.9``) and epsilon, as the reference
implementations do, through TensorFlow's fused kernel (:class:`FusedBatchNormalization`); a
convolution followed by BatchNorm has no bias (BatchNorm subtracts any per-channel constant, so
such a bias gets a zero gradient and changes nothing but the cost).
"""
from __future__ import annotations

import keras
import tensorflow as tf
from keras import layers


@keras.saving.register_keras_serializable(package="gcl_tf")
class FusedBatchNormalization(layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` computed by TensorFlow's fused kernel (FusedBatchNormV3)
    for 4-D float32 channels-last inputs: one op forward and one backward instead of Keras 3's
    element-wise moments, normalisation and their gradients (its effect on the ConvNet GCL step,
    with the bias-free convolutions: docs/performance.md). The same weights and
    outputs; the moving variance is updated with the unbiased batch variance, as PyTorch does
    (Keras uses the biased one: a factor n / (n - 1), n = batch x height x width). Any other
    input, a mask, renorm or synchronized statistics take Keras's own path."""

    def _fusable(self, inputs, mask) -> bool:
        return (mask is None and not self.renorm and not self.synchronized and self.scale and self.center
                and len(inputs.shape) == 4 and self.axis in (-1, 3) and inputs.dtype == tf.float32)

    def call(self, inputs, training=None, mask=None):
        if not self._fusable(inputs, mask):
            return super().call(inputs, training=training, mask=mask)
        gamma, beta = tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta)
        mean, variance = tf.convert_to_tensor(self.moving_mean), tf.convert_to_tensor(self.moving_variance)
        if training and self.trainable:
            outputs, new_mean, new_variance = tf.compat.v1.nn.fused_batch_norm(
                inputs, gamma, beta, mean=mean, variance=variance, epsilon=self.epsilon, is_training=True,
                exponential_avg_factor=1.0 - self.momentum,
            )
            self.moving_mean.assign(new_mean)
            self.moving_variance.assign(new_variance)
            return outputs
        outputs, _, _ = tf.compat.v1.nn.fused_batch_norm(inputs, gamma, beta, mean=mean, variance=variance,
                                                          epsilon=self.epsilon, is_training=False)
        return outputs


BN = dict(momentum=0.9, epsilon=1e-5)


def mlp(input_shape, hidden_size: int, name: str = "mlp") -> keras.Model:
    """Flatten -> Dense(h) -> ReLU -> Dense(h) -> ReLU (two hidden layers)."""
    inputs = keras.Input(shape=input_shape)
    x = layers.Flatten()(inputs)
    x = layers.Dense(hidden_size, activation="relu", name="hidden1")(x)
    x = layers.Dense(hidden_size, activation="relu", name="hidden2")(x)
    return keras.Model(inputs, x, name=name)


# The authors' convolution initialisation: Kaiming normal (fan_in, untruncated, std sqrt(2 / fan_in)).
KAIMING_NORMAL = dict(scale=2.0, mode="fan_in", distribution="untruncated_normal")
# The ConvNet's max-pools follow these convolutions (1-based): 32 -> 16 -> 8 -> 4 -> 2.
CONVNET_POOLS = (2, 4, 5, 6)


def convnet(input_shape, filters: int = 64, name: str = "convnet", seed=None) -> keras.Model:
    """The GCL paper's encoder as its authors build it: 6 x [conv3x3, BatchNorm, ReLU] with a 2x2
    max-pool after conv 2, 4, 5 and 6, Kaiming-normal convolutions.

    Extra max-pools follow until the feature map is at most 2x2 (64 x 2 x 2 = 256 features for
    32x32 inputs; 84x84 inputs also end at 2x2).
    """
    inputs = keras.Input(shape=input_shape)
    x = inputs
    for i in range(1, 7):
        init = keras.initializers.VarianceScaling(**KAIMING_NORMAL, seed=None if seed is None else seed + i)
        x = layers.Conv2D(filters, 3, padding="same", use_bias=False, kernel_initializer=init, name=f"conv{i}")(x)
        x = FusedBatchNormalization(name=f"bn{i}", **BN)(x)
        x = layers.ReLU()(x)
        if i in CONVNET_POOLS and x.shape[1] >= 2 and x.shape[2] >= 2:
            x = layers.MaxPooling2D(2, name=f"pool_conv{i}")(x)
    extra = 0
    while x.shape[1] > 2 or x.shape[2] > 2:
        extra += 1
        x = layers.MaxPooling2D(2, name=f"pool_extra{extra}")(x)
    x = layers.Flatten()(x)
    return keras.Model(inputs, x, name=name)


def _basic_block(x, filters: int, stride: int, name: str):
    shortcut = x
    y = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False, name=f"{name}_conv1")(x)
    y = FusedBatchNormalization(name=f"{name}_bn1", **BN)(y)
    y = layers.ReLU()(y)
    y = layers.Conv2D(filters, 3, strides=1, padding="same", use_bias=False, name=f"{name}_conv2")(y)
    y = FusedBatchNormalization(name=f"{name}_bn2", **BN)(y)
    if stride != 1 or shortcut.shape[-1] != filters:
        shortcut = layers.Conv2D(filters, 1, strides=stride, use_bias=False, name=f"{name}_short")(shortcut)
        shortcut = FusedBatchNormalization(name=f"{name}_short_bn", **BN)(shortcut)
    return layers.ReLU()(layers.Add()([y, shortcut]))


def resnet18(input_shape, filters: int = 20, name: str = "resnet18") -> keras.Model:
    """GEM's reduced ResNet-18: BasicBlocks [2, 2, 2, 2] with nf, 2nf, 4nf, 8nf filters (nf = 20),
    a stride-1 3x3 stem, global average pooling (GEM's avg_pool2d(4) on 32x32 inputs)."""
    inputs = keras.Input(shape=input_shape)
    x = layers.Conv2D(filters, 3, padding="same", use_bias=False, name="stem")(inputs)
    x = FusedBatchNormalization(name="stem_bn", **BN)(x)
    x = layers.ReLU()(x)
    for stage, (mult, stride) in enumerate([(1, 1), (2, 2), (4, 2), (8, 2)]):
        for block in range(2):
            x = _basic_block(x, filters * mult, stride if block == 0 else 1, name=f"layer{stage + 1}_{block}")
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, x, name=name)


def _keeps_framework_default(initializer) -> bool:
    return type(initializer) is keras.initializers.GlorotUniform


def torch_default_init(root) -> int:
    """Re-draw, as PyTorch's ``nn.Linear`` and ``nn.Conv2d`` do by default, the weights of every
    built ``Dense`` and ``Conv2D`` under ``root`` (a layer or model, nested ones included) whose
    kernel keeps Keras's default initializer: kernel and bias ``U(-b, b)``, ``b = 1 / sqrt(fan_in)``
    (PyTorch's ``kaiming_uniform_(a=sqrt(5))``, Keras's ``VarianceScaling(1/3, fan_in, uniform)``).
    Layers given another initializer on purpose (the ConvNet's Kaiming normal) keep their weights.
    Draws from Keras's global seed (``keras.utils.set_random_seed``); returns how many layers it
    re-drew. ``model.initializer: torch`` applies it to a method's networks."""
    import numpy as np

    count, seen = 0, set()
    layers_ = [root] if isinstance(root, layers.Layer) else []
    layers_ += list(root._flatten_layers(include_self=False, recursive=True))
    for layer in layers_:
        if not isinstance(layer, (layers.Dense, layers.Conv2D)) or not layer.built or id(layer) in seen:
            continue
        seen.add(id(layer))
        if not _keeps_framework_default(layer.kernel_initializer):
            continue
        shape = tuple(layer.kernel.shape)
        fan_in = int(np.prod(shape[:-1]))
        bound = 1.0 / np.sqrt(fan_in)
        layer.kernel.assign(keras.initializers.RandomUniform(-bound, bound)(shape, dtype=layer.kernel.dtype))
        if layer.use_bias:
            layer.bias.assign(keras.initializers.RandomUniform(-bound, bound)(tuple(layer.bias.shape),
                                                                               dtype=layer.bias.dtype))
        count += 1
    return count


DEFAULT_FILTERS = {"convnet": 64, "resnet18": 20}  # the paper's, for model.filters: null


def describe(model_config) -> str:
    """The trunk in a few words: ``mlp (256 hidden units)``, ``resnet18 (20 filters)``."""
    if model_config.backbone == "mlp":
        return f"mlp ({model_config.hidden_size} hidden units)"
    return f"{model_config.backbone} ({model_config.filters or DEFAULT_FILTERS[model_config.backbone]} filters)"


def build_backbone(model_config, input_shape) -> keras.Model:
    if model_config.backbone == "mlp":
        return mlp(input_shape, model_config.hidden_size)
    if model_config.backbone in DEFAULT_FILTERS:
        build = convnet if model_config.backbone == "convnet" else resnet18
        return build(input_shape, model_config.filters or DEFAULT_FILTERS[model_config.backbone])
    raise ValueError(f"unknown backbone {model_config.backbone!r}")


def classifier(backbone: keras.Model, input_shape, num_classes: int, name: str = "classifier") -> keras.Model:
    """``backbone`` followed by one linear layer (``logits``) to ``num_classes`` logits; features
    of more than one axis are flattened first."""
    inputs = keras.Input(shape=tuple(input_shape))
    features = backbone(inputs)
    if len(features.shape) > 2:
        features = layers.Flatten(name="flatten_features")(features)
    logits = layers.Dense(num_classes, name="logits")(features)
    return keras.Model(inputs, logits, name=name)


def feature_size(backbone: keras.Model, input_shape) -> int:
    """The width D of the features ``[N, D]`` that ``backbone`` computes from images of ``input_shape``."""
    shape = backbone.compute_output_shape((None,) + tuple(input_shape))
    if len(shape) != 2:
        from gcl_tf.errors import ConfigError

        raise ConfigError(f"backbone: gives features of shape {tuple(shape)}; allowed: vectors [N, D] "
                          "(end it with a Flatten or a pooling layer)")
    return int(shape[-1])


def build_classifier(model_config, input_shape, num_classes: int, name: str = "classifier") -> keras.Model:
    """The configured backbone followed by one linear layer to ``num_classes`` logits."""
    return classifier(build_backbone(model_config, input_shape), input_shape, num_classes, name=name)
