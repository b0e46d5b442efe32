"""What the reliability tests share: runs in a process or through the CLI, killed at a chosen
point, their results and checkpoints read back and compared bit for bit, each method's small settings."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, TINY, _deep_update, random_split, write_idx

# GCL on a tiny permuted-digits stream: 3 tasks x 2 epochs x 4 batches of 10. Task t trains the
# global steps 8t+1 .. 8t+8; checkpoints at steps 5, 10, 15, 20 (every 5) and 8, 16, 24 (task ends).
GCL_RUN = """\
seed: 0
benchmark: {name: permuted, dataset: digits, source: digits, num_tasks: 3, samples_per_task: 40,
            test_samples_per_task: 60}
method: {name: gcl, memory_size: 20, test_graph_samples: 4, context_temperature: 0.1}
model: {backbone: mlp, hidden_size: 16}
train: {batch_size: 10, epochs: 2, optimizer: adam, learning_rate: 0.003, verbose: 0, log_every: 0,
        checkpoint_every: 5}
eval: {batch_size: 64}
"""


CHECKPOINT_STEPS = (5, 8, 10, 15, 16, 20, 24)


# Runs gcl_tf.train and SIGKILLs itself: "step N" right after training step N (before its
# checkpoint), "save N" while writing checkpoint ckpt-N (its files are written, the index that
# names the latest checkpoint is not updated yet).
KILLER = """\
import os, signal, sys
from gcl_tf import callbacks, train
mode, value = sys.argv[1], int(sys.argv[2])

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if mode == "step":
    after_batch = callbacks.PeriodicCheckpoint.on_train_batch_end
    def on_train_batch_end(self, batch, logs=None):
        if self.step + self._per_call == value:
            die()
        return after_batch(self, batch, logs)
    callbacks.PeriodicCheckpoint.on_train_batch_end = on_train_batch_end
elif mode == "save":
    from tensorflow.python.checkpoint import checkpoint_management
    update = checkpoint_management.update_checkpoint_state_internal
    def update_index(save_dir, model_checkpoint_path, *args, **kwargs):
        if os.path.basename(model_checkpoint_path) == f"ckpt-{value}":
            die()
        return update(save_dir, model_checkpoint_path, *args, **kwargs)
    checkpoint_management.update_checkpoint_state_internal = update_index
sys.exit(train.main(sys.argv[3:]))
"""


ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


TF_DEVICE_LOG = ("E0000 ", "W0000 ")  # TensorFlow's device probing (no GPU driver here), not ours


def python(*args, timeout=600):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO, env=ENV,
                          timeout=timeout)


def train_cli(config, out, *extra):
    return python("-m", "gcl_tf.train", "--config", str(config), "--output", str(out), "--deterministic", *extra)


def train_in_process(config, out, *extra):
    """A deterministic run of the command's main in this process (a TensorFlow start-up fewer than
    :func:`train_cli`); checkpoints compare by object, not by the Keras names a process gives."""
    from gcl_tf import train

    assert train.main(["--config", str(config), "--output", str(out), "--deterministic", *extra]) == 0
    return out


def completed_run(config, out, *extra):
    """``out`` after a deterministic CLI run of ``config`` that must succeed."""
    proc = train_cli(config, out, *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def config_file(tmp_path_factory, text: str, name: str = "config.yaml"):
    """``text`` written to a new file ``name`` in a fresh folder of the test session."""
    path = tmp_path_factory.mktemp("config") / name
    path.write_text(text)
    return path


def results_of(run_dir) -> dict:
    with open(os.path.join(run_dir, "results.json")) as handle:
        return json.load(handle)


def latest(run_dir):
    import tensorflow as tf

    return tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints"))


def checkpoint_arrays(path) -> dict:
    """Every value saved in a checkpoint but the save counter and the timings: weights, optimizer
    slots, the whole method state (GCL's memory), the stream position and the accuracy matrix."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    skip = ("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter", "progress/task_seconds", "progress/eval_seconds")
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not any(s in name for s in skip)}


def assert_bit_identical(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    different = [name for name in a if a[name].tobytes() != b[name].tobytes()]
    assert not different, different


# ----------------------------------------------------------------------------- kill and resume
_pick = random.Random(8)  # the kill steps are drawn at random, reproducibly


KILLS = {
    # A few steps into task 3, before its first periodic checkpoint: resume at the task's start.
    "early_in_a_task": ("step", _pick.choice([17, 18, 19, 20]), 16, (2, 0)),
    # In task 1's second epoch after the checkpoint at step 5 (batch 1 of that epoch): resume mid-epoch.
    "mid_task_after_a_periodic_checkpoint": ("step", _pick.choice([6, 7, 8]), 5, (0, 5)),
    # At task 2's end, after its evaluation, while its checkpoint is written (files written, index not
    # updated): resume from step 15, train the last step again and evaluate task 2 once.
    "around_a_task_boundary": ("save", 16, 15, (1, 7)),
}


# ----------------------------------------------------------------------------- every method, in process
def method_settings() -> dict:
    """Every registered method and the small settings its class declares (``test_settings``)."""
    from gcl_tf import methods

    return {name: methods.method_class(name).test_settings for name in methods.names()}


METHOD_SETTINGS = method_settings()


class Crash(Exception):
    pass


def small_config(make_config, method, **train):
    settings = {"train": {"epochs": 2, "checkpoint_every": 4, **train},
                "benchmark": {"num_tasks": 2, "samples_per_task": 30, "test_samples_per_task": 30},
                "method": {"name": method, **METHOD_SETTINGS[method]}}
    if method == "gcl":
        settings["train"].update(optimizer="adam", learning_rate=0.003)
    return make_config(settings)


# ----------------------------------------------------------------------------- NaN
def write_config(tmp_path, update=None, name="config.yaml"):
    import yaml

    path = tmp_path / name
    path.write_text(yaml.safe_dump(_deep_update(TINY, update or {})))
    return str(path)


def cli_error(argv, capsys) -> str:
    from gcl_tf import train

    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        train.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ----------------------------------------------------------------------------- bad input
def write_png_folder(root, sizes: dict):
    """root/{train,test}/<class>/0.png, 1.png (grayscale); ``sizes[(split, class)]`` = (h, w)."""
    from PIL import Image

    for (split, name), size in sizes.items():
        folder = root / split / name
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(2):
            Image.fromarray(np.full(size, 40 * k, np.uint8), mode="L").save(folder / f"{k}.png")


def bad_idx_folder(tmp_path, damage):
    folder = tmp_path / "idx"
    folder.mkdir()
    for stem, n, seed in (("train", 40, 1), ("t10k", 20, 2)):
        images, labels = random_split(n, (6, 6), 10, seed)
        write_idx(folder / f"{stem}-images-idx3-ubyte", images)
        write_idx(folder / f"{stem}-labels-idx1-ubyte", labels)
    target = folder / "train-images-idx3-ubyte"
    raw = target.read_bytes()
    if damage == "magic":
        target.write_bytes(b"\x00\x00\x0d\x03" + raw[4:])
    elif damage == "truncated":
        target.write_bytes(raw[:-7])
    return {"benchmark": {"source": "idx", "path": str(folder), "samples_per_task": 20}}


def bad_input(case, tmp_path):
    """(config update or raw YAML text, expected fragment of the message)."""
    if case == "malformed_yaml":
        return "train:\n  batch_size: [\n", "not valid YAML"
    if case == "unknown_key":
        return {"train": {"lr": 0.1}}, "unknown key 'train.lr'"
    if case == "wrong_type":
        return {"train": {"batch_size": "ten"}}, "train.batch_size: expected an integer"
    if case == "missing_data_path":
        return {"benchmark": {"source": "idx", "path": str(tmp_path / "nowhere")}}, "does not exist"
    if case == "idx_bad_magic":
        return bad_idx_folder(tmp_path, "magic"), "bad IDX magic number"
    if case == "idx_truncated":
        return bad_idx_folder(tmp_path, "truncated"), "truncated"
    if case == "labels_outside_class_range":
        update = bad_idx_folder(tmp_path, None)
        update["benchmark"]["num_classes"] = 5
        return update, "fall outside the class range"
    if case == "image_size_differs_from_config":
        x, y = random_split(60, (8, 8), 10, 0)
        np.savez(tmp_path / "data.npz", x_train=x, y_train=y, x_test=x[:20], y_test=y[:20])
        return ({"benchmark": {"source": "npz", "path": str(tmp_path / "data.npz"), "image_size": 10,
                               "samples_per_task": 20}}, "benchmark.image_size is 10")
    if case in ("folder_test_images_of_another_size", "folder_empty_class"):
        sizes = {(s, c): (7, 5) for s in ("train", "test") for c in ("a", "b")}
        if case == "folder_test_images_of_another_size":
            sizes[("test", "b")] = (9, 9)
        write_png_folder(tmp_path / "images", sizes)
        if case == "folder_empty_class":
            (tmp_path / "images" / "train" / "c").mkdir()
            (tmp_path / "images" / "test" / "c").mkdir()
        update = {"benchmark": {"source": "folder", "path": str(tmp_path / "images"), "color_mode": "grayscale",
                                "samples_per_task": 2}, "train": {"batch_size": 2}}  # (a larger batch: said first)
        expected = "is 9x9 but the training images are 7x5" if "size" in case else "is empty"
        return update, expected
    if case == "batch_larger_than_a_task":
        return {"benchmark": {"samples_per_task": 5}}, "train.batch_size: 10 is more than the 5"
    raise ValueError(case)


BAD_INPUTS = ["malformed_yaml", "unknown_key", "wrong_type", "missing_data_path", "idx_bad_magic", "idx_truncated",
              "labels_outside_class_range", "image_size_differs_from_config", "folder_test_images_of_another_size",
              "folder_empty_class", "batch_larger_than_a_task"]


def snapshot(folder) -> dict:
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            out[os.path.relpath(path, folder)] = (open(path, "rb").read(), os.stat(path).st_mtime_ns)
    return out

