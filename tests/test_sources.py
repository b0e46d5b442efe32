"""Every image source on small data written to tmp_path, offline (TFDS: tests/test_tfds.py)."""
from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from gcl_tf.data.sources import make_source, read_idx
from gcl_tf.errors import DataError

from conftest import random_split, write_idx


def load_both(config):
    source = make_source(config.benchmark)
    return source, source.load("train"), source.load("test")


def one_line_data_error(call) -> str:
    with pytest.raises(DataError) as info:
        call()
    message = str(info.value)
    assert message and "\n" not in message
    return message


# ------------------------------------------------------------------------------------- idx
def write_idx_folder(folder, gz: bool, n_train=30, n_test=12, labels_max=10):
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    arrays = {}
    for stem, n, seed in (("train", n_train, 1), ("t10k", n_test, 2)):
        images, labels = random_split(n, (6, 5), labels_max, seed)
        write_idx(folder / f"{stem}-images-idx3-ubyte{suffix}", images)
        write_idx(folder / f"{stem}-labels-idx1-ubyte{suffix}", labels)
        arrays[stem] = (images, labels)
    return arrays


@pytest.mark.parametrize("gz", [False, True])
def test_idx_source_reads_mnist_format_files(tmp_path, make_config, gz):
    arrays = write_idx_folder(tmp_path / "idx", gz)
    config = make_config({"benchmark": {"source": "idx", "path": str(tmp_path / "idx")}})
    source, train, test = load_both(config)
    for split, stem in ((train, "train"), (test, "t10k")):
        images, labels = arrays[stem]
        assert split.images.dtype == np.uint8 and split.images.shape == images.shape + (1,)
        np.testing.assert_array_equal(split.images[..., 0], images)
        np.testing.assert_array_equal(split.labels, labels)
        assert split.labels.dtype == np.int64
    assert source.num_classes == 10


def test_idx_bad_magic_truncated_and_missing_files(tmp_path, make_config):
    images, _ = random_split(4, (3, 3), 2, 0)
    good = tmp_path / "good-idx3-ubyte"
    write_idx(good, images)
    np.testing.assert_array_equal(read_idx(str(good)), images)

    raw = good.read_bytes()
    bad_magic = tmp_path / "bad-magic"
    bad_magic.write_bytes(b"\x00\x00\x0d\x03" + raw[4:])  # dtype code 0x0d (float) is not ours
    assert "magic" in one_line_data_error(lambda: read_idx(str(bad_magic)))
    bad_magic.write_bytes(b"PK\x03\x04" + raw[4:])
    assert "magic" in one_line_data_error(lambda: read_idx(str(bad_magic)))

    truncated = tmp_path / "truncated"
    truncated.write_bytes(raw[:-5])
    assert "truncated" in one_line_data_error(lambda: read_idx(str(truncated)))
    truncated.write_bytes(raw[:10])  # inside the header
    assert "truncated" in one_line_data_error(lambda: read_idx(str(truncated)))
    truncated_gz = tmp_path / "truncated.gz"
    truncated_gz.write_bytes(gzip.compress(raw)[:-12])
    assert "truncated" in one_line_data_error(lambda: read_idx(str(truncated_gz)))

    folder = tmp_path / "idx"
    write_idx_folder(folder, gz=True)
    (folder / "t10k-labels-idx1-ubyte.gz").unlink()
    source = make_source(make_config({"benchmark": {"source": "idx", "path": str(folder)}}).benchmark)
    source.load("train")
    assert "t10k-labels-idx1-ubyte" in one_line_data_error(lambda: source.load("test"))
    missing = make_config({"benchmark": {"source": "idx", "path": str(tmp_path / "nowhere")}})
    assert "does not exist" in one_line_data_error(lambda: make_source(missing.benchmark).load("train"))


def test_idx_labels_outside_class_range(tmp_path, make_config):
    folder = tmp_path / "idx"
    write_idx_folder(folder, gz=False)
    config = make_config({"benchmark": {"source": "idx", "path": str(folder), "num_classes": 5}})
    message = one_line_data_error(lambda: make_source(config.benchmark).load("train"))
    assert "fall outside the class range 0..4 that benchmark.num_classes 5 sets" in message


# ------------------------------------------------------------------------------------- npz
def test_npz_source_reads_keras_style_arrays(npz_config, npz_file):
    _, (x_train, y_train, x_test, y_test) = npz_file
    source, train, test = load_both(npz_config())
    np.testing.assert_array_equal(train.images[..., 0], x_train)
    np.testing.assert_array_equal(train.labels, y_train)
    np.testing.assert_array_equal(test.images[..., 0], x_test)
    np.testing.assert_array_equal(test.labels, y_test)
    assert source.num_classes == 10


def test_npz_float_images_and_column_labels(tmp_path, make_config):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(10, 4, 4, 3)).astype(np.uint8)
    y = (np.arange(10) % 3)[:, None]  # Keras CIFAR style: [N, 1]
    path = tmp_path / "float.npz"
    np.savez(path, x_train=x / 255.0, y_train=y, x_test=x[:4] / 255.0, y_test=y[:4])
    config = make_config({"benchmark": {"source": "npz", "path": str(path)}})
    _, train, test = load_both(config)
    np.testing.assert_array_equal(train.images, x)
    np.testing.assert_array_equal(train.labels, y[:, 0])
    assert test.images.shape == (4, 4, 4, 3)


def test_npz_errors(tmp_path, make_config):
    x, y = random_split(20, (4, 4), 4, 0)

    def source_of(**arrays):
        path = tmp_path / "bad.npz"
        np.savez(path, **arrays)
        return make_source(make_config({"benchmark": {"source": "npz", "path": str(path)}}).benchmark)

    assert "x_test" in one_line_data_error(lambda: source_of(x_train=x, y_train=y).load("test"))
    negative = y.copy()
    negative[3] = -1
    assert "outside the class range" in one_line_data_error(
        lambda: source_of(x_train=x, y_train=negative).load("train"))
    # Test labels beyond the classes inferred from the training labels (0..3).
    beyond = y[:5].copy()
    beyond[0] = 7
    source = source_of(x_train=x, y_train=y, x_test=x[:5], y_test=beyond)
    message = one_line_data_error(lambda: source.load("test"))
    assert "outside the class range" in message and "0..3" in message
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip file")
    config = make_config({"benchmark": {"source": "npz", "path": str(garbage)}})
    assert "not a readable .npz" in one_line_data_error(lambda: make_source(config.benchmark).load("train"))


@pytest.mark.parametrize("fill", [b"\xff" * 8, b"\x00" * 8])
def test_an_npz_damaged_in_the_middle_names_the_array_and_what_is_wrong(tmp_path, make_config, fill):
    """Bytes overwritten inside x_test's compressed data: zlib stops (its exception's class is
    called "error", which alone said nothing) or the CRC-32 check fails; the line names the array
    and the problem. The training split still reads."""
    import zipfile

    from gcl_tf.io import write_npz_atomic

    x, y = random_split(20, (4, 4), 4, 0)
    path = tmp_path / "damaged.npz"
    write_npz_atomic(str(path), {"x_train": x, "y_train": y, "x_test": x, "y_test": y})
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("x_test.npy")
    middle = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.compress_size // 2
    raw = bytearray(path.read_bytes())
    raw[middle:middle + len(fill)] = fill
    path.write_bytes(bytes(raw))
    source = make_source(make_config({"benchmark": {"source": "npz", "path": str(path)}}).benchmark)
    assert len(source.load("train")) == 20
    message = one_line_data_error(lambda: source.load("test"))
    assert re.fullmatch(rf"{re.escape(str(path))}: its array x_test is damaged \((zlib\.error: Error -3 while "
                        r"decompressing data: \w[\w ]+|zipfile\.BadZipFile: Bad CRC-32 for file 'x_test\.npy')\); "
                        "the file changed after it was written: write or copy it again", message), message
    path.write_bytes(bytes(raw[:len(raw) // 2]))  # cut short: no zip directory at its end
    message = one_line_data_error(lambda: make_source(source.config).load("train"))
    assert message == f"{path}: not a readable .npz file (zipfile.BadZipFile: File is not a zip file)"


# ---------------------------------------------------------------------------------- folder
def write_png_folder(root, classes: dict[str, int], size=(7, 5), seed=0):
    """root/{train,test}/<class>/*.png grayscale images; returns {split: {class: [arrays]}}."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    written = {}
    for split, factor in (("train", 1), ("test", 2)):
        written[split] = {}
        for name, count in classes.items():
            folder = root / split / name
            folder.mkdir(parents=True)
            images = []
            for k in range(count * factor):
                image = rng.integers(0, 256, size=size, dtype=np.uint8)
                Image.fromarray(image, mode="L").save(folder / f"{k:03d}.png")
                images.append(image)
            written[split][name] = images
    return written


def test_folder_source_classes_in_sorted_name_order(tmp_path, make_config):
    # Names whose creation order differs from their sorted order.
    classes = {"zebra": 3, "ant": 2, "moth": 4}
    written = write_png_folder(tmp_path / "imgs", classes)
    config = make_config({"benchmark": {"source": "folder", "path": str(tmp_path / "imgs"),
                                        "color_mode": "grayscale"}})
    source, train, test = load_both(config)
    assert source.num_classes == 3
    order = sorted(classes)  # ant -> 0, moth -> 1, zebra -> 2
    for split, data in (("train", train), ("test", test)):
        assert data.images.shape[1:] == (7, 5, 1) and data.images.dtype == np.uint8
        for label, name in enumerate(order):
            got = data.images[data.labels == label][..., 0]
            expected = np.stack(written[split][name])
            assert len(got) == len(expected)
            # Same images (PNG is lossless), whatever the order inside the class.
            assert sorted(a.tobytes() for a in got) == sorted(a.tobytes() for a in expected)

    rgb = make_config({"benchmark": {"source": "folder", "path": str(tmp_path / "imgs"), "image_size": 4,
                                     "color_mode": "rgb"}})
    train = make_source(rgb.benchmark).load("train")
    assert train.images.shape == (9, 4, 4, 3)


def test_a_folder_source_is_listed_by_one_function(tmp_path, make_config, monkeypatch):
    """files.class_images: the class folders and their image files, sorted (other files and a file
    beside the class folders left out); the folder source's classes, size checks, loading and
    to-npz's colour check all read their files through it."""
    import types

    from gcl_tf.data import files

    write_png_folder(tmp_path / "imgs", {"zebra": 2, "ant": 1})
    (tmp_path / "imgs" / "train" / "ant" / "notes.txt").write_text("not an image")
    (tmp_path / "imgs" / "train" / "ant" / "B.PNG").write_bytes((tmp_path / "imgs/train/ant/000.png").read_bytes())
    (tmp_path / "imgs" / "train" / "README").write_text("not a class")
    root = str(tmp_path / "imgs" / "train")
    assert files.class_images(root) == {
        "ant": [os.path.join(root, "ant", name) for name in ("000.png", "B.PNG")],
        "zebra": [os.path.join(root, "zebra", name) for name in ("000.png", "001.png")]}
    assert list(files.folder_images(str(tmp_path / "imgs"), ("train",))) == [
        p for paths in files.class_images(root).values() for p in paths]

    listed, inside = [], []
    real_listing, real_listdir = files.class_images, os.listdir

    def class_images(folder):
        listed.append(folder)
        inside.append(True)
        try:
            return real_listing(folder)
        finally:
            inside.pop()

    def listdir(*args):
        assert inside, f"{args}: a folder source listed a folder outside files.class_images"
        return real_listdir(*args)

    guarded_os = types.ModuleType("os")  # files.py's os (Keras's own listing left alone)
    guarded_os.__dict__.update(vars(os))
    guarded_os.listdir = listdir
    monkeypatch.setattr(files, "class_images", class_images)
    monkeypatch.setattr(files, "os", guarded_os)
    config = make_config({"benchmark": {"source": "folder", "path": str(tmp_path / "imgs"),
                                        "color_mode": "grayscale"}})
    source = make_source(config.benchmark)
    assert source.class_names() == ["ant", "zebra"]
    assert source.load("train").images.shape == (4, 7, 5, 1)
    assert sorted(files.folder_colours(str(tmp_path / "imgs"))) == ["grayscale"]
    assert {os.path.basename(folder) for folder in listed} == {"train", "test"}


def test_folder_source_takes_the_images_colour_mode_unless_color_mode_is_given(tmp_path, make_config):
    """benchmark.color_mode null (the default) reads a folder's images as to-npz does: grayscale
    PNGs [N, H, W, 1] (the config records grayscale, as a run's config.yaml), colour PNGs rgb, a
    mix one line naming benchmark.color_mode; an explicit value wins; other sources keep rgb
    (what configs saved before the default hold)."""
    from PIL import Image

    from gcl_tf.config import precheck
    from gcl_tf.data.__main__ import to_npz

    written = write_png_folder(tmp_path / "gray", {"b": 2, "a": 1}, size=(6, 4))  # mode L PNGs
    with Image.open(tmp_path / "gray" / "train" / "a" / "000.png") as image:
        assert image.mode == "L"
    gray = make_config({"benchmark": {"source": "folder", "path": str(tmp_path / "gray")}})
    assert gray.benchmark.color_mode == "grayscale"
    _, train, test = load_both(gray)
    assert train.images.shape == (3, 6, 4, 1) and test.images.shape == (6, 6, 4, 1)
    np.testing.assert_array_equal(train.images[..., 0], np.stack(written["train"]["a"] + written["train"]["b"]))
    to_npz("folder", str(tmp_path / "gray"), str(tmp_path / "gray.npz"))  # to-npz decides alike
    with np.load(tmp_path / "gray.npz") as archive:
        np.testing.assert_array_equal(archive["x_train"], train.images)

    explicit = make_config({"benchmark": {"source": "folder", "path": str(tmp_path / "gray"), "color_mode": "rgb"}})
    assert explicit.benchmark.color_mode == "rgb"
    assert make_source(explicit.benchmark).load("train").images.shape == (3, 6, 4, 3)

    colour = tmp_path / "colour"
    for split in ("train", "test"):
        (colour / split / "a").mkdir(parents=True)
        Image.fromarray(np.full((6, 4, 3), 9, np.uint8)).save(colour / split / "a" / "0.png")
        (colour / split / "b").mkdir()
        Image.fromarray(np.full((6, 4, 3), 200, np.uint8)).save(colour / split / "b" / "0.png")
    rgb = make_config({"benchmark": {"source": "folder", "path": str(colour)}})
    assert rgb.benchmark.color_mode == "rgb" and make_source(rgb.benchmark).load("test").images.shape == (2, 6, 4, 3)

    Image.fromarray(np.full((6, 4, 3), 9, np.uint8)).save(tmp_path / "gray" / "test" / "b" / "zz.png")
    config = tmp_path / "mix.yaml"
    config.write_text(f"benchmark: {{source: folder, path: {str(tmp_path / 'gray')!r}}}\n")
    message = one_line_data_error(lambda: precheck(str(config)))  # before TensorFlow: exit 2 at the CLI
    first_gray, first_colour = str(tmp_path / "gray" / "train" / "a" / "000.png"), str(tmp_path / "gray/test/b/zz.png")
    assert message == (f"benchmark.path: the images mix grayscale ({first_gray!r}) and colour ({first_colour!r}); "
                       "allowed: benchmark.color_mode: grayscale or rgb to convert every image to one")
    assert precheck(str(config), ["benchmark.color_mode=grayscale"]).benchmark.color_mode == "grayscale"
    assert make_config({"benchmark": {"source": "digits"}}).benchmark.color_mode == "rgb"


def test_folder_source_errors(tmp_path, make_config):
    write_png_folder(tmp_path / "imgs", {"a": 2, "b": 2})
    (tmp_path / "imgs" / "train" / "c").mkdir()  # an empty class folder
    config = make_config({"benchmark": {"source": "folder", "path": str(tmp_path / "imgs")}})
    message = one_line_data_error(lambda: make_source(config.benchmark).load("train"))
    assert "empty" in message and "train/c" in message
    missing = make_config({"benchmark": {"source": "folder", "path": str(tmp_path / "none")}})
    assert "does not exist" in one_line_data_error(lambda: make_source(missing.benchmark).load("train"))


def test_folder_source_checks_every_image_size(tmp_path, make_config):
    """Without benchmark.image_size no image is resized: one of another size anywhere in a class
    (not its first) is a one-line error naming it; with image_size every image is resized."""
    from PIL import Image

    write_png_folder(tmp_path / "imgs", {"a": 3, "b": 3})
    odd = tmp_path / "imgs" / "test" / "b" / "004.png"  # the fifth of six test images of class b
    Image.fromarray(np.zeros((9, 5), np.uint8), mode="L").save(odd)
    config = make_config({"benchmark": {"source": "folder", "path": str(tmp_path / "imgs")}})
    source = make_source(config.benchmark)
    assert source.load("train").images.shape[1:3] == (7, 5)
    message = one_line_data_error(lambda: source.load("test"))
    assert "test/b/004.png" in message and "9x5" in message and "7x5" in message and "image_size" in message
    resized = make_config({"benchmark": {"source": "folder", "path": str(tmp_path / "imgs"), "image_size": 6}})
    assert make_source(resized.benchmark).load("test").images.shape[:3] == (12, 6, 6)


def test_to_npz_keeps_grayscale_pngs_one_channel_and_names_a_colour_mix_or_a_damaged_png(tmp_path, capsys):
    """python -m gcl_tf.data to-npz without --color-mode: MNIST-like single-channel PNGs become
    [N, 28, 28, 1] (not three copies of the channel), colour PNGs [N, 28, 28, 3]; a folder mixing
    both is one line naming an image of each and --color-mode (which converts them all); a PNG
    damaged in its middle is one line naming it (TensorFlow's decoder names no file)."""
    from PIL import Image

    from gcl_tf.data.__main__ import main

    def convert(path, *more):
        output = tmp_path / f"{path.name}-{len(list(tmp_path.glob('*.npz')))}.npz"
        main(["to-npz", "--source", "folder", "--path", str(path), "--output", str(output), *more])
        with np.load(output) as archive:
            return archive["x_train"], archive["x_test"]

    def refused(path, *more) -> str:
        capsys.readouterr()
        with pytest.raises(SystemExit) as stop:
            convert(path, *more)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: "), err
        return err.strip()

    written = write_png_folder(tmp_path / "gray", {"a": 2, "b": 2}, size=(28, 28))
    x_train, x_test = convert(tmp_path / "gray")
    assert x_train.shape == (4, 28, 28, 1) and x_test.shape == (8, 28, 28, 1)
    np.testing.assert_array_equal(x_train[..., 0], np.stack(written["train"]["a"] + written["train"]["b"]))
    assert "4 training and 8 test images of 28x28x1, 2 classes" in capsys.readouterr().out
    assert convert(tmp_path / "gray", "--color-mode", "rgb")[0].shape == (4, 28, 28, 3)

    colour = tmp_path / "colour" / "train" / "a"
    colour.mkdir(parents=True)
    Image.fromarray(np.full((28, 28, 3), 7, np.uint8)).save(colour / "0.png")
    (tmp_path / "colour" / "test").mkdir()
    shutil.copytree(colour, tmp_path / "colour" / "test" / "a")
    assert convert(tmp_path / "colour")[0].shape == (1, 28, 28, 3)

    Image.fromarray(np.full((28, 28, 3), 7, np.uint8)).save(tmp_path / "gray" / "test" / "b" / "zz.png")
    assert refused(tmp_path / "gray") == (
        f"error: --path: the images mix grayscale ({str(tmp_path / 'gray' / 'train' / 'a' / '000.png')!r}) and "
        f"colour ({str(tmp_path / 'gray' / 'test' / 'b' / 'zz.png')!r}); allowed: --color-mode grayscale or "
        "--color-mode rgb to convert every image to one")
    assert convert(tmp_path / "gray", "--color-mode", "grayscale")[1].shape == (9, 28, 28, 1)

    damaged = tmp_path / "damaged"
    write_png_folder(damaged, {"a": 2, "b": 2}, size=(28, 28))
    png = damaged / "train" / "b" / "001.png"
    raw = bytearray(png.read_bytes())
    raw[len(raw) // 2:len(raw) // 2 + 40] = bytes(range(40))
    png.write_bytes(bytes(raw))
    message = refused(damaged)
    assert message.startswith(f"error: benchmark.path: cannot decode image {str(png)!r} (OSError: "), message
    assert message.endswith("; replace or remove it") and "function_node" not in message


# ---------------------------------------------------------------------------------- digits
def test_digits_source(make_config):
    source, train, test = load_both(make_config())
    assert train.images.shape == (1347, 8, 8, 1) and test.images.shape == (450, 8, 8, 1)
    assert train.images.dtype == np.uint8 and train.images.max() == 255
    assert source.num_classes == 10
    assert set(np.unique(train.labels)) == set(range(10)) == set(np.unique(test.labels))
    # The split is fixed: loading again gives the same arrays.
    _, train_again, _ = load_both(make_config())
    np.testing.assert_array_equal(train.images, train_again.images)


@pytest.mark.slow
def test_folder_converts_to_npz_that_the_npz_source_reads_identically(tmp_path, make_config):
    """python -m gcl_tf.data to-npz: the npz source then gives exactly the folder source's arrays."""

    write_png_folder(tmp_path / "imgs", {"zebra": 3, "ant": 2})
    out = tmp_path / "data.npz"
    command = [sys.executable, "-m", "gcl_tf.data", "to-npz", "--source", "folder", "--path", str(tmp_path / "imgs"),
               "--color-mode", "grayscale", "--output", str(out)]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "5 training and 10 test images of 7x5x1, 2 classes" in done.stdout
    folder = make_config({"benchmark": {"source": "folder", "path": str(tmp_path / "imgs"), "color_mode": "grayscale"}})
    npz = make_config({"benchmark": {"source": "npz", "path": str(out)}})
    _, folder_train, folder_test = load_both(folder)
    _, npz_train, npz_test = load_both(npz)
    for a, b in ((folder_train, npz_train), (folder_test, npz_test)):
        np.testing.assert_array_equal(a.images, b.images)
        np.testing.assert_array_equal(a.labels, b.labels)
    with np.load(out) as archive:
        assert list(archive["class_names"]) == ["ant", "zebra"]
    again = subprocess.run(command, capture_output=True, text=True)  # never replaced silently
    assert again.returncode == 2 and again.stderr.strip().count("\n") == 0
    assert "exists" in again.stderr and "--overwrite" in again.stderr
