"""The in-step augmentation (gcl_tf/augment.py, ``benchmark.augment: ocl``): each operation against
a numpy computation, the draws keyed by the seed, and the methods' use of it (the incoming and
replayed images augmented, the memory keeping them raw, one trace, the others refusing it)."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import math

import numpy as np
import pytest


def images(n=8, size=12, channels=3, seed=0):
    return np.random.default_rng(seed).uniform(size=(n, size, size, channels)).astype(np.float32)


def bilinear_half_pixel(image, top, left, h, w, out):
    """The crop rows [top, top + h), columns [left, left + w) resized to ``out x out`` with
    half-pixel centres (torchvision's bilinear, no antialias), sample positions clamped inside."""
    height, width = image.shape[:2]

    def axis(start, size, full):
        pos = start + (np.arange(out) + 0.5) * size / out - 0.5
        return np.clip(pos, 0, full - 1)

    ys, xs = axis(top, h, height), axis(left, w, width)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, height - 1), np.minimum(x0 + 1, width - 1)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    rows0 = image[y0][:, x0] * (1 - fx) + image[y0][:, x1] * fx
    rows1 = image[y1][:, x0] * (1 - fx) + image[y1][:, x1] * fx
    return rows0 * (1 - fy) + rows1 * fy


def test_crop_windows_follow_torchvisions_draw():
    import tensorflow as tf

    from gcl_tf import augment

    n, size = 4000, 32
    top, left, h, w = (t.numpy() for t in augment.crop_windows((n, size, size), tf.constant([3, 4])))
    area = h * w / size ** 2
    # the scale range up to the rounding of h and w; the ratio range likewise
    assert np.all(area > 0.2 * 0.9) and np.all(area <= 1.0)
    assert (w / h).min() > 0.75 * 0.9 and (w / h).max() < 4 / 3 / 0.9
    # torchvision's draw, in plain numpy (a try whose side exceeds the image's is drawn again)
    rng = np.random.default_rng(0)
    reference = []
    for _ in range(n):
        for _ in range(10):
            a = rng.uniform(0.2, 1.0) * size ** 2
            r = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
            ww, hh = round(math.sqrt(a * r)), round(math.sqrt(a / r))
            if 0 < ww <= size and 0 < hh <= size:
                reference.append(ww * hh / size ** 2)
                break
        else:
            reference.append(1.0)
    assert np.abs(np.quantile(area, [0.25, 0.5, 0.75]) - np.quantile(reference, [0.25, 0.5, 0.75])).max() < 0.02
    assert np.all((top >= 0) & (left >= 0) & (top + h <= size) & (left + w <= size))
    assert np.all(top == np.round(top)) and np.std(top[h < 16]) > 3  # whole pixels, spread over the positions
    # a scale that never fits (an area above the image's): the whole image
    whole = [t.numpy() for t in augment.crop_windows((5, size, size), tf.constant([0, 1]), scale=(1.5, 2.0))]
    np.testing.assert_array_equal(np.stack(whole), [[0] * 5, [0] * 5, [size] * 5, [size] * 5])


def test_resized_crop_matches_a_numpy_bilinear_resize():
    import tensorflow as tf

    from gcl_tf import augment

    x = images(6, 16)
    seed = tf.constant([7, 8])
    out = augment.random_resized_crop(tf.constant(x), seed).numpy()
    windows = np.stack([t.numpy() for t in augment.crop_windows((6, 16, 16), seed)], axis=1).astype(int)
    boxes = augment.crop_boxes((6, 16, 16), seed).numpy()
    checked = 0
    for i, (top, left, h, w) in enumerate(windows):
        if boxes[i].min() <= 0 or boxes[i].max() >= 1:  # clamped at an edge: the numpy clamps per sample
            continue
        np.testing.assert_allclose(out[i], bilinear_half_pixel(x[i], top, left, h, w, 16), atol=1e-4)
        checked += 1
    assert checked >= 3


def test_flip_grayscale_and_jitter_against_numpy():
    import tensorflow as tf

    from gcl_tf import augment

    x = images(64, 6)
    seed = tf.constant([1, 2])
    flipped = augment.random_flip(tf.constant(x), seed).numpy()
    mirrored = [np.array_equal(f, i[:, ::-1]) for f, i in zip(flipped, x)]
    kept = [np.array_equal(f, i) for f, i in zip(flipped, x)]
    assert all(m or k for m, k in zip(mirrored, kept)) and 16 < sum(mirrored) < 48
    gray = augment.random_grayscale(tf.constant(x), seed, p=1.0).numpy()
    luma = x @ np.array([0.299, 0.587, 0.114], np.float32)
    np.testing.assert_allclose(gray, np.repeat(luma[..., None], 3, axis=-1), atol=1e-6)
    np.testing.assert_array_equal(augment.random_grayscale(tf.constant(x), seed, p=0.0).numpy(), x)
    # brightness alone (the others off): each image scaled by one factor in [0.6, 1.4], clipped
    bright = augment.color_jitter(tf.constant(x), seed, contrast=0.0, saturation=0.0, hue=0.0, p=1.0).numpy()
    unclipped = (bright > 0) & (bright < 0.999) & (x > 0.1)  # (the HSV round trip moves values by ~1e-7)
    ratios = [b[u] / i[u] for b, i, u in zip(bright, x, unclipped)]  # (hue 0 still converts to HSV and back)
    assert all(np.ptp(r) < 2e-3 and 0.6 - 1e-3 <= r.mean() <= 1.4 + 1e-3 for r in ratios)
    assert np.std([r.mean() for r in ratios]) > 0.1
    # saturation 0 is the identity; hue a full turn is the identity
    same = augment.adjust_hue(tf.constant(x), tf.ones([64, 1, 1])).numpy()
    np.testing.assert_allclose(same, x, atol=1e-5)
    # p = 0: untouched
    np.testing.assert_array_equal(augment.color_jitter(tf.constant(x), seed, p=0.0).numpy(), x)


def test_the_set_is_keyed_by_the_seed_and_stays_in_range():
    import tensorflow as tf

    from gcl_tf import augment

    x = tf.constant(images(16, 8))
    a = augment.augment(x, "ocl", tf.constant([5, 6])).numpy()
    b = augment.augment(x, "ocl", tf.constant([5, 6])).numpy()
    c = augment.augment(x, "ocl", tf.constant([5, 7])).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    assert a.min() >= 0 and a.max() <= 1 and a.shape == x.shape
    np.testing.assert_array_equal(augment.augment(x, "none", tf.constant([5, 6])).numpy(), x.numpy())
    gray_images = tf.constant(images(4, 8, channels=1))  # one channel: crop, flip, brightness, contrast
    assert augment.augment(gray_images, "ocl", tf.constant([1, 1])).shape == (4, 8, 8, 1)
    with pytest.raises(ValueError, match="allowed: none, ocl, crop_flip"):
        augment.augment(x, "flip", tf.constant([1, 1]))


def test_crop_flip_is_the_sets_geometric_half_without_its_colour():
    """``crop_flip``: ocl's crop and flip with the same draws, then no colour step: an image of one
    colour per channel comes back unchanged (a resized crop of a flat image is the image), which
    the colour jitter and the grayscale of ``ocl`` change."""
    import tensorflow as tf

    from gcl_tf import augment

    x = tf.constant(images(16, 8))
    seed = tf.constant([3, 4])
    s_crop, s_flip, _, _ = augment._seeds(seed, 4)
    geometric = augment.random_flip(augment.random_resized_crop(x, s_crop), s_flip).numpy()
    np.testing.assert_array_equal(augment.augment(x, "crop_flip", seed).numpy(), geometric)
    flat = tf.constant(np.broadcast_to(np.array([0.2, 0.5, 0.8], np.float32), (16, 8, 8, 3)).copy())
    np.testing.assert_allclose(augment.augment(flat, "crop_flip", seed).numpy(), flat.numpy(), atol=1e-6)
    coloured = augment.augment(flat, "ocl", seed).numpy()
    assert sum(not np.allclose(c, f, atol=1e-3) for c, f in zip(coloured, flat.numpy())) >= 8


def test_pad_crop_flip_is_a_window_of_the_zero_padded_image_per_image_then_the_flip():
    """``pad_crop_flip`` (CCL-DC's partial set): each output is the H x W window at some offset in
    [0, 8] of the image padded with 4 zeros, mirrored or not; offsets differ between images (one
    draw per image, not per batch) and every offset and both flips occur; the same seed, the same."""
    import tensorflow as tf

    from gcl_tf import augment

    x = images(64, 8, seed=1)
    seed = tf.constant([5, 6])
    out = augment.augment(tf.constant(x), "pad_crop_flip", seed).numpy()
    np.testing.assert_array_equal(out, augment.augment(tf.constant(x), "pad_crop_flip", seed).numpy())
    padded = np.pad(x, [(0, 0), (4, 4), (4, 4), (0, 0)])
    found = []
    for i in range(64):
        windows = {(t, c): padded[i, t:t + 8, c:c + 8, :] for t in range(9) for c in range(9)}
        hits = [(t, c, f) for (t, c), w in windows.items() for f in (False, True)
                if np.array_equal(out[i], w[:, ::-1] if f else w)]
        assert hits, f"image {i} is no flipped or plain window of its padded self"
        found.append(hits[0])
    assert len({(t, c) for t, c, _ in found}) > 20 and {f for _, _, f in found} == {False, True}


def spy_network(model, seen):
    """Record every batch the model's network is called on."""
    network = model.network
    call = network.call

    def recording(x, *args, **kwargs):
        seen.append(x)
        return call(x, *args, **kwargs)

    network.call = recording


@pytest.mark.parametrize("method", ["er", "er_ace", "derpp"])
def test_replay_methods_augment_what_they_train_on_and_store_it_raw(method):
    import keras
    import tensorflow as tf

    from gcl_tf import methods

    cls = methods.method_class(method)
    backbone = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(16, "relu")])
    model = cls(backbone, num_classes=4, memory_size=12, replay_batch_size=6, batch_size=4, augment="ocl")
    model.compile(optimizer=keras.optimizers.SGD(0.01))
    x = images(40, 8)
    y = (np.arange(40) % 4).astype(np.int32)
    step = tf.function(model.train_step)
    for i in range(10):
        step((tf.constant(x[4 * i:4 * i + 4]), tf.constant(y[4 * i:4 * i + 4])))
    assert step.experimental_get_tracing_count() == 1
    # the memory holds the incoming images exactly as they came
    stored = model.memory.images.numpy()[: int(model.memory.num_filled.numpy())]
    assert all(any(np.array_equal(s, r) for r in x) for s in stored)
    # what the network saw: augmented incoming and replayed images, none equal to a raw image
    seen = []
    spy_network(model, seen)
    model.train_step((tf.constant(x[:4]), tf.constant(y[:4])))
    batch = np.concatenate([np.asarray(s) for s in seen])
    assert len(batch) >= 4 + 6
    raw = x.reshape(40, -1)
    assert not any(np.any(np.all(np.isclose(raw, b.reshape(1, -1)), axis=1)) for b in batch)


def test_gcl_augments_targets_and_contexts_as_its_switch_says():
    import keras
    import tensorflow as tf

    import gcl_tf

    x = images(20, 8)
    y = (np.arange(20) % 4).astype(np.int32)
    seen = {}
    for contexts in (True, False):
        trunk = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(8, "relu")])
        model = gcl_tf.GCL(trunk, num_classes=4, memory_size=8, hidden_size=8, batch_size=4, augment="ocl",
                           augment_contexts=contexts)
        model.compile(optimizer=keras.optimizers.Adam(0.001))
        for i in range(4):
            model.train_step((tf.constant(x[4 * i:4 * i + 4]), tf.constant(y[4 * i:4 * i + 4])))
        stored = model.memory.images.numpy()
        assert all(any(np.array_equal(s, r) for r in x) for s in stored)  # raw in memory
        batches = []
        call = model.trunk.call
        model.trunk.call = lambda images, *a, **k: (batches.append(np.asarray(images)), call(images, *a, **k))[1]
        model.train_step((tf.constant(x[16:20]), tf.constant(y[16:20])))
        seen[contexts] = np.concatenate(batches)
    for contexts, batch in seen.items():
        flat = batch.reshape(len(batch), -1)
        memory_raw = sum(np.any(np.all(np.isclose(x.reshape(20, -1), f), axis=1)) for f in flat)
        assert memory_raw == (0 if contexts else 8)  # the 8 contexts as stored, or each augmented


def test_methods_without_it_refuse_it_in_one_line():
    import gcl_tf
    from gcl_tf.errors import ConfigError

    with pytest.raises(ConfigError, match=r"augment: ewc does not augment inside its step; allowed: none"):
        gcl_tf.EWC(num_classes=4, num_tasks=2, input_shape=(8, 8, 3), augment="ocl")
    with pytest.raises(ConfigError, match="allowed: none, ocl, crop_flip"):
        gcl_tf.ER(num_classes=4, input_shape=(8, 8, 3), augment="crop")


def test_a_run_with_the_protocol_keeps_the_stream_raw(make_config):
    from gcl_tf.data.base import SplitData
    from gcl_tf.data.streams import train_dataset

    data = SplitData(images=(np.arange(4 * 8 * 8 * 3) % 256).astype(np.uint8).reshape(4, 8, 8, 3),
                     labels=np.arange(4))
    raw, _ = train_dataset(data, 2, 1, 0, 0, augment="none")
    ocl, _ = train_dataset(data, 2, 1, 0, 0, augment="ocl")
    for a, b in zip(raw, ocl):
        np.testing.assert_array_equal(a[0].numpy(), b[0].numpy())
    config = make_config({"benchmark": {"augment": "ocl"}, "method": {"name": "er"}})
    from gcl_tf import methods

    assert methods.run_arguments(config, (8, 8, 1), 10)["augment"] == "ocl"
