"""``python -m gcl_tf.data to-npz``: convert any image source once into the ``npz`` source's file.

Decoding an image folder (the ``folder`` source: ``train/<class>/*.jpg``, ``test/<class>/*``) is
slow: CIFAR-10's 60,000 JPEGs take minutes on every run. Converted once, a run reads them in
about a second with ``benchmark.source: npz``:

    python -m gcl_tf.data to-npz --source folder --path CIFAR-10-images --output data/cifar10.npz
    python -m gcl_tf.train --config configs/split_cifar10.yaml \\
        --set benchmark.source=npz --set benchmark.path=data/cifar10.npz

The file holds ``x_train, y_train, x_test, y_test`` (uint8 images ``[N, H, W, C]``, int64 labels)
and ``class_names`` when the source knows them; it is written atomically. Folder images keep
their kind: one channel when every image has one (MNIST-like PNGs), RGB when every image has
colour; ``--color-mode`` converts a mix. Every check of the source applies (image sizes, empty
classes, unreadable or damaged files: one line, exit status 2).
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from gcl_tf.data.config import BenchmarkConfig
from gcl_tf.errors import UserError, exit_on_user_error
from gcl_tf.io import write_npz_atomic

PROG = "python -m gcl_tf.data"


def folder_color_mode(path: str) -> str:
    """The colour mode of a folder of images when none is given (as the folder source's
    ``benchmark.color_mode: null``: gcl_tf.data.files.folder_color_mode), a mix named in the
    command line's words."""
    from gcl_tf.data.files import folder_color_mode as detect

    return detect(path, "--path", "--color-mode grayscale or --color-mode rgb")


NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


def check_output(output: str, path, overwrite: bool) -> None:
    """--output can take the file: not the source's --path, not inside it nor above it; a new
    file, or with --overwrite a .npz of the data source (its four arrays: what to-npz writes), nothing else."""
    import zipfile

    from gcl_tf.overwrite import check_apart

    if not str(output).strip():
        raise UserError("--output: empty; allowed: the path of a .npz file to write")
    check_apart(output, {"--path": path}, "--output")
    if not os.path.lexists(output):
        return
    if os.path.isdir(output):
        raise UserError(f"--output: {output} is a folder; allowed: the path of a .npz file (a new one, or with "
                        "--overwrite one that to-npz wrote)")
    if not overwrite:
        raise UserError(f"--output: {output!r} exists; allowed: a new file, or --overwrite")
    try:
        with zipfile.ZipFile(output) as archive:
            names = {os.path.splitext(n)[0] for n in archive.namelist()}
    except (OSError, zipfile.BadZipFile):
        names = set()
    if not set(NPZ_KEYS) <= names:
        raise UserError(f"--output: {output} is not a .npz of x_train, y_train, x_test, y_test; --overwrite "
                        "replaces only such a file (what to-npz writes); allowed: a new file or such a one")


def to_npz(source: str, path, output: str, dataset: str = "data", image_size=None, color_mode: str | None = None,
           overwrite: bool = False) -> dict:
    """Read both splits of a source and write them to ``output`` as a ``.npz``; returns the counts.
    ``color_mode`` None: the folder source's images' own (:func:`folder_color_mode`)."""
    from gcl_tf.data.sources import make_source

    check_output(output, path, overwrite)
    if source == "npz":
        raise UserError("--source: npz is already the target format; allowed: folder, idx, tfds, digits")
    if color_mode is None:
        color_mode = folder_color_mode(path) if source == "folder" and os.path.isdir(str(path)) else "rgb"
    config = BenchmarkConfig(source=source, path=path, dataset=dataset, image_size=image_size, color_mode=color_mode)
    data = make_source(config)
    train, test = data.load("train"), data.load("test")
    arrays = {"x_train": train.images, "y_train": train.labels, "x_test": test.images, "y_test": test.labels}
    names = data.class_names()
    if names is not None:
        arrays["class_names"] = np.asarray(names)
    write_npz_atomic(output, arrays)
    return {"train": len(train), "test": len(test), "image_shape": list(train.images.shape[1:]),
            "classes": data.num_classes}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("to-npz", help="convert a source (e.g. an image folder) to one .npz file")
    convert.add_argument("--source", required=True, choices=["folder", "idx", "tfds", "digits"])
    convert.add_argument("--path", help="the source's benchmark.path (folder root, IDX folder, TFDS data_dir)")
    convert.add_argument("--dataset", default="data", help="benchmark.dataset (the TFDS name for source tfds)")
    convert.add_argument("--image-size", type=int, default=None, help="resize folder images to N x N")
    convert.add_argument("--color-mode", default=None, choices=["rgb", "grayscale"],
                         help="convert folder images to this (default: grayscale when every image has one "
                              "channel, rgb when every image has colour)")
    convert.add_argument("--output", required=True, help="the .npz file to write")
    convert.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    return parser


@exit_on_user_error
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.source in ("folder", "idx") and not args.path:
        raise UserError(f"--path: required for source {args.source}; give the data location")
    counts = to_npz(args.source, args.path, args.output, dataset=args.dataset, image_size=args.image_size,
                    color_mode=args.color_mode, overwrite=args.overwrite)
    print(f"{args.output}: {counts['train']} training and {counts['test']} test images of "
          f"{'x'.join(map(str, counts['image_shape']))}, {counts['classes']} classes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
