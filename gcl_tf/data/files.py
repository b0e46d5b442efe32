"""The sources that read files given by ``benchmark.path``: ``idx`` (a folder of MNIST-format
files), ``npz`` (a Keras-style .npz) and ``folder`` (an image folder per class)."""
from __future__ import annotations

import functools
import gzip
import os
import re
import struct

import numpy as np

from gcl_tf.data.base import Source, SplitData, _as_labels, _as_uint8_images
from gcl_tf.errors import DataError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")


# -------------------------------------------------------------------------------------- idx
_IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def read_idx(path: str) -> np.ndarray:
    """Read one IDX file (optionally gzipped) of unsigned bytes; clear errors on corruption."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            raw = handle.read()
    except (OSError, EOFError) as error:
        raise DataError(f"{path}: cannot read ({error.__class__.__name__}: {error}); "
                        "the file may be truncated") from None
    if len(raw) < 4:
        raise DataError(f"{path}: truncated IDX file ({len(raw)} bytes)")
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08 or ndim not in (1, 3):
        raise DataError(
            f"{path}: bad IDX magic number 0x{int.from_bytes(raw[:4], 'big'):08x}; "
            "allowed: 0x00000801 (labels) or 0x00000803 (images)"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header")
    dims = struct.unpack(">" + "I" * ndim, raw[4:header])
    expected = int(np.prod(dims))
    if len(raw) - header != expected:
        raise DataError(
            f"{path}: truncated or oversized IDX data: {len(raw) - header} bytes for shape {list(dims)} "
            f"({expected} expected)"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


class IdxSource(Source):
    name = "idx"

    def _find(self, stem):
        for candidate in (stem, stem + ".gz"):
            path = os.path.join(self.config.path, candidate)
            if os.path.isfile(path):
                return path
        raise DataError(f"benchmark.path: {self.config.path!r} has no {stem}[.gz] (an MNIST-format IDX folder)")

    def _load(self, split):
        if not os.path.isdir(self.config.path):
            raise DataError(f"benchmark.path: folder {self.config.path!r} does not exist")
        image_stem, label_stem = _IDX_FILES[split]
        image_path, label_path = self._find(image_stem), self._find(label_stem)
        images = read_idx(image_path)
        labels = read_idx(label_path)
        if images.ndim != 3:
            raise DataError(f"{image_path}: expected a 3-dimensional image file, got {images.ndim} dimensions")
        if labels.ndim != 1:
            raise DataError(f"{label_path}: expected a 1-dimensional label file, got {labels.ndim} dimensions")
        if len(images) != len(labels):
            raise DataError(f"{image_path}: {len(images)} images but {len(labels)} labels in {label_path}")
        return SplitData(images[..., None].copy(), labels.astype(np.int64))


# -------------------------------------------------------------------------------------- npz
def describe_error(error: BaseException) -> str:
    """``module.Class: first line`` of an exception, e.g. ``zlib.error: Error -3 while
    decompressing data: invalid distance code`` (its bare class name alone says "error")."""
    kind = type(error)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__.rsplit('.', 1)[-1]}.{kind.__name__}"
    text = " ".join(str(error).split())
    return f"{name}: {text}" if text else name


def read_npz_array(archive, key: str, path: str) -> np.ndarray:
    """One array of an open .npz; a DataError naming the array and what is wrong with it when its
    bytes do not decompress or fail their checksum (a file damaged after it was written)."""
    try:
        return archive[key]
    except Exception as error:  # zlib.error, zipfile.BadZipFile (bad CRC-32), ValueError (header), ...
        raise DataError(f"{path}: its array {key} is damaged ({describe_error(error)}); "
                        "the file changed after it was written: write or copy it again") from None


class NpzSource(Source):
    name = "npz"

    def _load(self, split):
        path = self.config.path
        if not os.path.isfile(path):
            raise DataError(f"benchmark.path: file {path!r} does not exist")
        x_key, y_key = f"x_{split}", f"y_{split}"
        with open(path, "rb") as handle:
            zipped = handle.read(2) == b"PK"  # a zip's (a .npz's) first bytes
        if not zipped:  # numpy would take it for a pickle, and advise allow_pickle
            raise DataError(f"{path}: not a readable .npz file (not a zip archive); allowed: a .npz written by "
                            "numpy.savez or python -m gcl_tf.data to-npz, with x_train, y_train, x_test, y_test")
        try:
            archive = np.load(path, allow_pickle=False)
        except Exception as error:  # zipfile.BadZipFile (a damaged zip), ValueError, ...
            raise DataError(f"{path}: not a readable .npz file ({describe_error(error)})") from None
        with archive:
            keys = set(archive.files)
            if x_key not in keys or y_key not in keys:
                raise DataError(f"{path}: missing {x_key}/{y_key}; a .npz needs x_train, y_train, x_test, y_test")
            images, labels = (read_npz_array(archive, key, path) for key in (x_key, y_key))
        images = _as_uint8_images(images, f"{path} {x_key}")
        return SplitData(images, _as_labels(labels, len(images), f"{path} {y_key}"))


# ----------------------------------------------------------------------------------- folder
def class_images(root: str) -> dict[str, list[str]]:
    """One split of a folder source, ``root/<class>/*``: ``{class: the paths of its image files}``,
    the class folders and each one's images (by extension: IMAGE_EXTENSIONS) in sorted order. The
    one listing of a folder source's files: every reader below goes through it."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    return {name: [os.path.join(root, name, f) for f in sorted(os.listdir(os.path.join(root, name)))
                   if f.lower().endswith(IMAGE_EXTENSIONS)]
            for name in classes}


def folder_images(path: str, splits=("train", "test")):
    """Every image file of a folder source, ``path/<split>/<class>/*``, in sorted order."""
    for split in splits:
        root = os.path.join(path, split)
        if os.path.isdir(root):
            for files in class_images(root).values():
                yield from files


def image_colour(path: str) -> str:
    """``grayscale`` for an image of one channel (with or without alpha: PIL modes 1, L, LA, I,
    I;16, F), ``rgb`` for colour (RGB, RGBA, a palette, CMYK...): read from its header."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            mode = image.mode
    except Exception as error:
        raise DataError(f"benchmark.path: cannot read image {path!r} ({describe_error(error)})") from None
    return "grayscale" if Image.getmodebase(mode) == "L" else "rgb"


def folder_colours(path: str) -> dict[str, str]:
    """The colour kinds of a folder source's images: ``{kind: the first image of that kind}``,
    kind ``grayscale`` or ``rgb`` (headers only, no decoding)."""
    first: dict[str, str] = {}
    for file in folder_images(path):
        first.setdefault(image_colour(file), file)
        if len(first) == 2:
            break
    return first


def folder_color_mode(path: str, path_key: str = "benchmark.path",
                      mode_choices: str = "benchmark.color_mode: grayscale or rgb") -> str:
    """The colour mode of a folder source's images when none is given: ``grayscale`` when every
    image has one channel (MNIST-like PNGs stay ``[N, H, W, 1]``), ``rgb`` when every image has
    colour (and for a folder without images); a mix is a DataError naming one image of each kind
    and the setting that converts them all (``path_key``, ``mode_choices``: its words for the
    path and that setting: the config's, or to-npz's --path and --color-mode). Read once per
    folder state (headers only): a folder whose class folders change is read again."""
    kinds = _folder_colours_cached(os.path.abspath(path), _folder_state(path))
    if len(kinds) == 2:
        raise DataError(f"{path_key}: the images mix grayscale ({kinds['grayscale']!r}) and colour "
                        f"({kinds['rgb']!r}); allowed: {mode_choices} to convert every image to one")
    return next(iter(kinds), "rgb")


def _folder_state(path: str) -> tuple:
    """The modification times of a folder source's split and class folders (a file added,
    removed or renamed changes its folder's)."""
    folders = [os.path.join(path, split) for split in ("train", "test")]
    folders = [f for f in folders if os.path.isdir(f)]
    folders += [os.path.join(root, name) for root in folders for name in class_images(root)]
    return tuple(os.stat(f).st_mtime_ns for f in folders)


@functools.lru_cache(maxsize=16)
def _folder_colours_cached(path: str, state: tuple) -> dict:
    return folder_colours(path)


def first_undecodable(files) -> tuple[str, str] | None:
    """The first of ``files`` that PIL cannot decode whole, with why; None if all decode."""
    from PIL import Image

    for path in files:
        try:
            with Image.open(path) as image:
                image.load()
        except Exception as error:
            return path, describe_error(error)
    return None


class FolderSource(Source):
    name = "folder"
    uses_tensorflow = True  # Keras's image_dataset_from_directory

    def _split_images(self, split) -> tuple[str, dict[str, list[str]]]:
        """The split's folder and its :func:`class_images`, checked: a class folder at least,
        and images in every one."""
        root = os.path.join(self.config.path, split)
        if not os.path.isdir(root):
            raise DataError(f"benchmark.path: {root!r} does not exist; "
                            "a folder source needs train/<class>/ and test/<class>/")
        images = class_images(root)
        if not images:
            raise DataError(f"benchmark.path: {root!r} has no class folders")
        for name, files in images.items():
            if not files:
                raise DataError(
                    f"benchmark.path: class folder {os.path.join(root, name)!r} is empty; "
                    f"every class needs images ({', '.join(IMAGE_EXTENSIONS)})"
                )
        return root, images

    def native_num_classes(self):
        return len(self._split_images("train")[1])

    def class_names(self):
        return list(self._split_images("train")[1])

    def _check_native_sizes(self, images: dict, size) -> None:
        """Without benchmark.image_size every image keeps its native size, which must be the
        training images' one: every image is checked (a header read each, no decoding), so none
        is silently resized."""
        from PIL import Image

        for files in images.values():
            for path in files:
                try:
                    with Image.open(path) as image:
                        width, height = image.size
                except Exception as error:
                    raise DataError(f"benchmark.path: cannot read image {path!r} "
                                    f"({describe_error(error)})") from None
                if (height, width) != tuple(size):
                    raise DataError(
                        f"benchmark.path: {path!r} is {height}x{width} but the training images are "
                        f"{size[0]}x{size[1]}; set benchmark.image_size to resize every image"
                    )

    def _image_size(self, train_images: dict):
        if self.config.image_size is not None:
            return self.config.image_size, self.config.image_size
        from PIL import Image

        first = next(iter(train_images.values()))[0]  # the first training image
        with Image.open(first) as image:
            width, height = image.size
        return height, width

    def _load(self, split):
        import keras

        root, images = self._split_images(split)
        train_images = images if split == "train" else self._split_images("train")[1]
        classes, train_classes = list(images), list(train_images)
        if classes != train_classes:
            raise DataError(f"benchmark.path: {root!r} has classes {classes[:5]}... "
                            f"but train/ has {train_classes[:5]}...")
        size = self._image_size(train_images)
        if self.config.image_size is None:
            self._check_native_sizes(images, size)
        try:
            dataset = keras.utils.image_dataset_from_directory(
                root,
                labels="inferred",
                label_mode="int",
                class_names=classes,
                color_mode=self.config.color_mode or folder_color_mode(self.config.path),
                batch_size=256,
                image_size=size,
                shuffle=False,
                verbose=False,
            )
            images, labels = [], []
            for x, y in dataset.as_numpy_iterator():
                images.append(np.clip(np.round(x), 0, 255).astype(np.uint8))
                labels.append(y.astype(np.int64))
        except Exception as error:
            bad = first_undecodable(folder_images(self.config.path, (split,)))
            if bad is not None:  # name the file TensorFlow's decoder stopped at
                raise DataError(f"benchmark.path: cannot decode image {bad[0]!r} ({bad[1]}); "
                                "replace or remove it") from None
            reason = re.sub(r"\{\{[^}]*\}\}\s*", "", str(error))  # without TF's {{function_node ...}}
            message = f"benchmark.path: cannot read images under {root!r} ({error.__class__.__name__}: {reason})"
            raise DataError(message.splitlines()[0]) from None
        return SplitData(np.concatenate(images), np.concatenate(labels))
