"""A local data source identified by its content, not its path (issue 71): a run records the
fingerprint of its ``benchmark.path`` (an npz file, an IDX folder, an image folder), and a run
planned on the same data elsewhere is the same run (a suite goes on, ``--resume`` continues).

The fingerprint is cheap: every file's relative path and size, and a sampled digest of the bytes
(a few chunks of each of a few files), enough to tell one data set from another, not a checksum.
Nothing heavy is imported.
"""
from __future__ import annotations

import hashlib
import os
from typing import Optional

LOCAL = ("npz", "idx", "folder")
CHUNK = 1 << 16  # bytes a sample reads
CHUNKS = 8  # samples of a file, evenly spaced (its first and last bytes among them)
SAMPLED_FILES = 64  # files of a folder whose bytes are sampled, evenly spaced in sorted order
KEY = "data_fingerprint"  # the name a run's results.json and model.json record it under


def _files(path: str) -> list[tuple[str, str]]:
    if os.path.isfile(path):
        return [("", path)]  # a file's own name does not matter: it may be renamed
    found = []
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(root, name)
            found.append((os.path.relpath(full, path), full))
    return found


def _sample(handle, size: int, digest) -> None:
    starts = sorted({min(max(size - CHUNK, 0), k * max(size - CHUNK, 0) // max(CHUNKS - 1, 1)) for k in range(CHUNKS)})
    for start in starts:
        handle.seek(start)
        digest.update(handle.read(CHUNK))


def fingerprint_of(source: str, path: Optional[str]) -> Optional[str]:
    """The content fingerprint of a local source's ``path``; None for another source or a missing path."""
    if source not in LOCAL or not path or not os.path.exists(path):
        return None
    digest = hashlib.sha256()
    files = _files(path)
    sampled = {round(k * (len(files) - 1) / (SAMPLED_FILES - 1)) for k in range(SAMPLED_FILES)}
    for index, (relative, full) in enumerate(files):
        size = os.path.getsize(full)
        digest.update(f"{relative}\0{size}\0".encode())
        if index in sampled:
            with open(full, "rb") as handle:
                _sample(handle, size, digest)
    return "sampled-sha256:" + digest.hexdigest()[:32]


def fingerprint(benchmark) -> Optional[str]:
    """The fingerprint of a ``benchmark`` section's data (None: not a local source)."""
    return fingerprint_of(benchmark.source, benchmark.path)


def moved_data(saved: dict, planned, recorded: Optional[str] = None) -> tuple:
    """``("benchmark.path",)`` when a saved run's config ``saved`` (a dictionary) read the same
    data as the ``planned`` config from another path: the fingerprint it recorded (``recorded``;
    a run saved before fingerprints: its path's, when that path is still there) is the planned
    data's. Else ``()``: the path is part of the run's identity as any key is."""
    before = saved.get("benchmark") if isinstance(saved.get("benchmark"), dict) else {}
    b = planned.benchmark
    if before.get("path") == b.path or before.get("source") != b.source or b.source not in LOCAL:
        return ()
    now = fingerprint(b)
    was = recorded or fingerprint_of(before.get("source"), before.get("path"))
    return ("benchmark.path",) if now is not None and now == was else ()


def moved_run_data(run_dir: str, saved: dict, planned) -> tuple:
    """:func:`moved_data` for the run in ``run_dir``, with the fingerprint its model.json recorded."""
    import json

    from gcl_tf.run_layout import MODEL_INFO

    try:
        with open(os.path.join(run_dir, MODEL_INFO), encoding="utf-8") as handle:
            recorded = json.load(handle).get(KEY)
    except (OSError, ValueError, AttributeError):
        recorded = None
    return moved_data(saved, planned, recorded)
