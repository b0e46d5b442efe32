"""Atomic file writes: a temporary file in the same folder, fsync, then rename.

A write that fails (a full disk, an I/O error) leaves the previous file as it was and no
temporary file, and raises a one-line :class:`gcl_tf.errors.DiskError` (also an OSError)."""
from __future__ import annotations

import json
import os
import tempfile

import numpy as np

from gcl_tf.faults import disk_error


def _default(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _new_file_mode() -> int:
    """The permissions ``open()`` would give a new file: 0o666 less the process umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: str, data: bytes | str) -> None:
    try:
        _write_atomic(path, data)
    except OSError as error:
        raise disk_error(path, error) from None


def _write_atomic(path: str, data: bytes | str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        # mkstemp creates the file private (0600); give it the mode a plain write would have
        os.chmod(tmp, _new_file_mode())
        with os.fdopen(fd, mode) as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=2, default=_default, allow_nan=True) + "\n")


def read_json(path: str):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def write_npz_atomic(path: str, arrays: dict) -> None:
    """Write named numpy arrays as a compressed .npz, atomically."""
    import io

    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{name: np.asarray(value) for name, value in arrays.items()})
    write_atomic(path, buffer.getvalue())
