"""Classify image files with an exported model: ``python -m gcl_tf.predict OUT IMAGE... [--seed N]``.

``OUT`` is a folder written by ``python -m gcl_tf.export``. Each image (PNG, JPG, ... read with
PIL) is converted to the model's channels (grayscale or RGB), resized to its input size as the
folder source resizes training images (bilinear, ``tf.image.resize``) when its size differs, and
scaled to [0, 1]. The images are classified as one batch (``--seed``: GCL's graph sampling) and
one line is printed per image: ``IMAGE<TAB>class<TAB>probability``.
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import sys

import numpy as np

from gcl_tf.errors import DataError, UserError, exit_on_user_error
from gcl_tf.quiet import import_tensorflow


def read_metadata(export_dir: str) -> dict:
    from gcl_tf.export import METADATA
    from gcl_tf.io import read_json

    path = os.path.join(export_dir, METADATA)
    if not os.path.isfile(path):
        raise UserError(f"OUT: {path} is missing; is {export_dir!r} a folder written by gcl_tf.export?")
    try:
        return read_json(path)
    except ValueError:
        raise UserError(f"OUT: {path} is not valid JSON") from None


def load_images(paths, input_shape) -> np.ndarray:
    """float32 [N, H, W, C] in [0, 1]: each file converted to C channels and resized to H x W."""
    import tensorflow as tf
    from PIL import Image

    height, width, channels = (int(d) for d in input_shape)
    mode = {1: "L", 3: "RGB"}.get(channels)
    if mode is None:
        raise UserError(f"OUT: input shape {list(input_shape)}: only 1 or 3 channels can be read from image files")
    out = []
    for path in paths:
        try:
            with Image.open(path) as image:
                array = np.asarray(image.convert(mode), dtype=np.float32)
        except FileNotFoundError:
            raise DataError(f"IMAGE: {path!r} does not exist") from None
        except Exception as error:
            raise DataError(f"IMAGE: cannot read {path!r} as an image ({error.__class__.__name__})") from None
        if array.ndim == 2:
            array = array[..., None]
        if array.shape[:2] != (height, width):
            array = tf.image.resize(array, (height, width), method="bilinear").numpy()
        out.append(np.clip(np.round(array), 0.0, 255.0) / 255.0)
    return np.stack(out).astype(np.float32)


def predict(export_dir: str, paths, seed: int = 0):
    """``(probabilities [N, K], class names or None)`` for the image files ``paths``."""
    import tensorflow as tf

    from gcl_tf.export import SIGNATURE

    metadata = read_metadata(export_dir)
    images = load_images(paths, metadata["input_shape"])
    try:
        serve = tf.saved_model.load(export_dir).signatures[SIGNATURE]
    except Exception as error:  # a damaged or foreign SavedModel (protobuf, TensorFlow or OS errors)
        raise UserError(f"OUT: cannot load the SavedModel in {export_dir!r} ({error.__class__.__name__})") from None
    probabilities = serve(images=tf.constant(images), seed=tf.constant(seed, tf.int64))["probabilities"]
    return probabilities.numpy(), metadata.get("class_names")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gcl_tf.predict", description=__doc__.splitlines()[0])
    parser.add_argument("export_dir", metavar="OUT", help="a folder written by python -m gcl_tf.export")
    parser.add_argument("images", metavar="IMAGE", nargs="+", help="image files (PNG, JPG, ...)")
    parser.add_argument("--seed", type=int, default=0, help="seed of GCL's test-time graph sampling (default 0)")
    return parser


@exit_on_user_error
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import_tensorflow()
    probabilities, names = predict(args.export_dir, args.images, args.seed)
    for path, row in zip(args.images, probabilities):
        k = int(np.argmax(row))
        label = names[k] if names else str(k)
        print(f"{path}\t{label}\t{row[k]:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
