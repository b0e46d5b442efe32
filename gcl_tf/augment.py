"""Augmentation inside the compiled step: the online continual-learning protocol of today's re-runs.

The re-runs of online methods by Michel et al. (ICML 2024, Nicolas1203/mkd_ocl) and SCR's (Mai et al.,
2021) give every method the same augmentation of the incoming batch *and* of the replayed samples,
applied on the device each step; the memory keeps the raw images. (OCM and OnPro train on a set of
their own, flip, grayscale 0.25 and crop 0.3-1 with no colour jitter, which OnPro here always
applies: docs/onpro.md; the OCL survey of Mai et al. uses a crop with padding and a flip.) The set,
as their code builds it with kornia / torchvision (``ocl``):

- random resized crop to the image's size, area scale in [0.2, 1], aspect ratio in [3/4, 4/3]
  (torchvision's draw: 10 tries, else the whole image), bilinear;
- horizontal flip with probability 1/2;
- colour jitter with probability 0.8: brightness, contrast and saturation factors in [0.6, 1.4],
  hue shift in [-0.1, 0.1] of a turn;
- grayscale with probability 0.2.

``crop_flip`` is its geometric half alone (the crop and the flip, no colour step): not a
published protocol, a diagnostic switch (GCL on the reduced ResNet-18 learns under it and not
under the whole set: docs/reproducing/todays_protocol_diagnosis.md).

``pad_crop_flip`` is CCL-DC's ``partial`` set for DER++ and ER-ACE (and the OCL survey's): each image
padded with 4 zero pixels and cropped back at a random offset (torchvision's ``RandomCrop(32,
padding=4)``; per image here, where torchvision on a batch tensor draws one offset for the batch), then
the flip (docs/reproducing/rerun_settings.md).

Colour steps need three channels: on grayscale images only the crop, the flip and the
brightness and contrast factors apply. Deviations from torchvision, each below a pixel or a
rounding: the four jitter steps run in a fixed order (brightness, contrast, saturation, hue;
torchvision draws an order per call), the crop is resampled without antialiasing.

Everything is batched ``tf.image`` / ``tf.random.stateless_*`` work keyed by a ``[2]`` seed:
no Python per sample, the same draws for the same seed (a resumed run augments as the
uninterrupted one did). :func:`augment` is the entry point a method calls.
"""
from __future__ import annotations

import math

import tensorflow as tf

from gcl_tf.data.config import IN_STEP_AUGMENTATIONS

#: The names ``augment`` takes (a method's keyword, ``benchmark.augment`` for in-step sets).
IN_STEP = IN_STEP_AUGMENTATIONS

CROP_SCALE = (0.2, 1.0)
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)
CROP_TRIES = 10
JITTER_P = 0.8
BRIGHTNESS = CONTRAST = SATURATION = 0.4
HUE = 0.1
GRAYSCALE_P = 0.2
PAD = 4  # pad_crop_flip's zero border (pixels)
_LUMA = (0.299, 0.587, 0.114)


def _seeds(seed, count: int) -> list:
    """``count`` independent stateless seeds [2] from ``seed``."""
    split = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=count)
    return [split[i] for i in range(count)]


def crop_windows(shape, seed, scale=CROP_SCALE, ratio=CROP_RATIO, tries: int = CROP_TRIES):
    """``(top, left, h, w)`` [N] each, in pixels: a random resized crop's window in each of ``N``
    images ``shape = (N, H, W)``, drawn as torchvision draws it: ``tries`` candidates of area
    ``U(scale) * H * W`` and log-uniform aspect ratio ``w / h`` in ``ratio``, the first that fits
    the image, else the whole image; its corner uniform over the positions where it fits."""
    n, height, width = shape
    s_area, s_ratio, s_y, s_x = _seeds(seed, 4)
    area = tf.random.stateless_uniform([n, tries], s_area, scale[0], scale[1]) * (height * width)
    log_ratio = tf.random.stateless_uniform([n, tries], s_ratio, math.log(ratio[0]), math.log(ratio[1]))
    aspect = tf.exp(log_ratio)
    w = tf.round(tf.sqrt(area * aspect))
    h = tf.round(tf.sqrt(area / aspect))
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)  # [N, tries]
    first = tf.argmax(tf.cast(fits, tf.int32), axis=1, output_type=tf.int32)  # the first that fits (0 if none)
    any_fit = tf.reduce_any(fits, axis=1)
    h = tf.where(any_fit, tf.gather(h, first, batch_dims=1), float(height))  # [N]
    w = tf.where(any_fit, tf.gather(w, first, batch_dims=1), float(width))
    top = tf.floor(tf.random.stateless_uniform([n], s_y) * (height - h + 1))  # integer in [0, H - h]
    left = tf.floor(tf.random.stateless_uniform([n], s_x) * (width - w + 1))
    return top, left, h, w


def crop_boxes(shape, seed, scale=CROP_SCALE, ratio=CROP_RATIO, tries: int = CROP_TRIES):
    """[N, 4] normalised ``(y1, x1, y2, x2)`` boxes, as ``tf.image.crop_and_resize`` takes them,
    of the windows of :func:`crop_windows`: the outer sample points of a bilinear resize of the
    window back to ``H x W`` with half-pixel centres (``top + (k + 1/2) h / H - 1/2``,
    torchvision's), clamped into the image."""
    _, height, width = shape
    top, left, h, w = crop_windows(shape, seed, scale, ratio, tries)

    def corners(start, size, full):
        step = size / full  # the window's pixels per output pixel
        span = max(full - 1, 1)
        lo = (start + 0.5 * step - 0.5) / span
        hi = (start + size - 0.5 * step - 0.5) / span
        return tf.clip_by_value(lo, 0.0, 1.0), tf.clip_by_value(hi, 0.0, 1.0)

    y1, y2 = corners(top, h, float(height))
    x1, x2 = corners(left, w, float(width))
    return tf.stack([y1, x1, y2, x2], axis=1)


def random_resized_crop(images, seed, scale=CROP_SCALE):
    """Each image [N, H, W, C] cropped at random (:func:`crop_boxes`, area fraction in ``scale``)
    and resized back to H x W."""
    n, height, width = images.shape[0], images.shape[1], images.shape[2]
    boxes = crop_boxes((n, height, width), seed, scale=scale)
    return tf.image.crop_and_resize(images, boxes, tf.range(n), [height, width], method="bilinear")


def random_flip(images, seed, p: float = 0.5):
    """Each image mirrored left-right with probability ``p``."""
    flip = tf.random.stateless_uniform([images.shape[0], 1, 1, 1], seed) < p
    return tf.where(flip, tf.reverse(images, axis=[2]), images)


def grayscale(images):
    """[N, H, W, 1] luma of RGB images (ITU-R 601, torchvision's weights)."""
    return tf.reduce_sum(images * tf.constant(_LUMA, images.dtype), axis=-1, keepdims=True)


def _factor(seed, n: int, spread: float):
    """[N, 1, 1, 1] factors uniform in ``[1 - spread, 1 + spread]``."""
    return tf.random.stateless_uniform([n, 1, 1, 1], seed, 1.0 - spread, 1.0 + spread)


def adjust_hue(images, delta):
    """RGB images with their hue turned by ``delta`` [N, 1, 1] (fractions of a turn)."""
    hsv = tf.image.rgb_to_hsv(images)
    hue = tf.math.floormod(hsv[..., 0] + delta, 1.0)
    return tf.image.hsv_to_rgb(tf.stack([hue, hsv[..., 1], hsv[..., 2]], axis=-1))


def color_jitter(images, seed, brightness=BRIGHTNESS, contrast=CONTRAST, saturation=SATURATION, hue=HUE,
                 p: float = JITTER_P):
    """With probability ``p`` per image: brightness, contrast, saturation factors and a hue turn
    drawn per image (torchvision's ColorJitter ranges), results clipped to [0, 1] after each
    step; saturation and hue only on three channels."""
    n, channels = images.shape[0], images.shape[-1]
    s_apply, s_b, s_c, s_s, s_h = _seeds(seed, 5)
    out = tf.clip_by_value(images * _factor(s_b, n, brightness), 0.0, 1.0)
    gray = grayscale(out) if channels == 3 else out
    mean = tf.reduce_mean(gray, axis=[1, 2, 3], keepdims=True)
    out = tf.clip_by_value(mean + (out - mean) * _factor(s_c, n, contrast), 0.0, 1.0)
    if channels == 3:
        gray = grayscale(out)
        out = tf.clip_by_value(gray + (out - gray) * _factor(s_s, n, saturation), 0.0, 1.0)
        delta = tf.random.stateless_uniform([n, 1, 1], s_h, -hue, hue)
        out = tf.clip_by_value(adjust_hue(out, delta), 0.0, 1.0)
    apply = tf.random.stateless_uniform([n, 1, 1, 1], s_apply) < p
    return tf.where(apply, out, images)


def random_grayscale(images, seed, p: float = GRAYSCALE_P):
    """RGB images turned to gray (three equal channels) with probability ``p``; others as given."""
    if images.shape[-1] != 3:
        return images
    gray = tf.broadcast_to(grayscale(images), tf.shape(images))
    return tf.where(tf.random.stateless_uniform([images.shape[0], 1, 1, 1], seed) < p, gray, images)


def ocl(images, seed, colour: bool = True):
    """The online-CL protocol's set (module docstring) on float images [N, H, W, C] in [0, 1];
    ``colour=False``: its geometric half alone (crop and flip, the same draws for the same seed)."""
    s_crop, s_flip, s_jitter, s_gray = _seeds(seed, 4)
    out = random_resized_crop(images, s_crop)
    out = random_flip(out, s_flip)
    if not colour:
        return out
    out = color_jitter(out, s_jitter)
    return random_grayscale(out, s_gray)


def pad_crop(images, seed, pad: int = PAD):
    """Each image [N, H, W, C] padded with ``pad`` zeros on every side, then cropped back to H x W at
    an integer offset drawn uniformly in [0, 2 pad] each way, per image."""
    n, height, width = images.shape[0], images.shape[1], images.shape[2]
    padded = tf.pad(images, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
    s_y, s_x = _seeds(seed, 2)
    top = tf.random.stateless_uniform([n], s_y, 0, 2 * pad + 1, tf.int32)
    left = tf.random.stateless_uniform([n], s_x, 0, 2 * pad + 1, tf.int32)
    rows = top[:, None] + tf.range(height)[None, :]  # [N, H]
    cols = left[:, None] + tf.range(width)[None, :]  # [N, W]
    return tf.gather(tf.gather(padded, rows, axis=1, batch_dims=1), cols, axis=2, batch_dims=1)


def augment(images, name: str, seed):
    """``images`` [N, H, W, C] (float in [0, 1]) augmented by the set ``name`` (:data:`IN_STEP`)
    with the stateless ``seed`` [2]; ``none`` returns them as given."""
    if name == "none":
        return images
    if name in ("ocl", "crop_flip"):
        dtype = images.dtype
        return tf.cast(ocl(tf.cast(images, tf.float32), seed, colour=name == "ocl"), dtype)
    if name == "pad_crop_flip":
        s_crop, s_flip = _seeds(seed, 2)
        return random_flip(pad_crop(images, s_crop), s_flip)
    raise ValueError(f"unknown in-step augmentation {name!r}; allowed: {', '.join(IN_STEP)}")
