"""Reliability: a run killed with SIGKILL and resumed ends as an uninterrupted one (bit-identical
with --deterministic), deterministic runs repeat, a NaN stops training with the last good
checkpoint kept, writes are atomic, and bad input is one line with exit status 2 that leaves an
existing run folder untouched."""
from __future__ import annotations

import json
import os
import random
import signal
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


@pytest.fixture(scope="module")
def gcl_config(tmp_path_factory):
    return config_file(tmp_path_factory, GCL_RUN, "gcl.yaml")


@pytest.fixture(scope="module")
def reference(gcl_config, tmp_path_factory):
    """The uninterrupted deterministic run."""
    return completed_run(gcl_config, tmp_path_factory.mktemp("reference") / "run")


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


@pytest.mark.parametrize("where", list(KILLS))
@pytest.mark.slow
def test_a_killed_run_resumes_to_the_same_results(where, gcl_config, reference, tmp_path):
    mode, value, expected_step, (task, batch) = KILLS[where]
    out = tmp_path / "run"
    killer = tmp_path / "killer.py"
    killer.write_text(KILLER)
    proc = python(str(killer), mode, str(value), "--config", str(gcl_config), "--output", str(out),
                  "--deterministic")
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert not (out / "results.json").exists()

    # The latest checkpoint is the last complete one and loads; GCL's memory is in it.
    path = latest(out)
    assert path is not None and path.endswith(f"ckpt-{expected_step}"), path
    saved = checkpoint_arrays(path)
    position = (int(saved["progress/task/.ATTRIBUTES/VARIABLE_VALUE"]),
                int(saved["progress/batch/.ATTRIBUTES/VARIABLE_VALUE"]))
    assert position == (task, batch)
    assert int(saved["model/memory/num_seen/.ATTRIBUTES/VARIABLE_VALUE"]) == 10 * expected_step
    assert int(saved["model/memory/num_filled/.ATTRIBUTES/VARIABLE_VALUE"]) == 20
    accuracy = saved["progress/accuracy/.ATTRIBUTES/VARIABLE_VALUE"]
    assert np.all(np.isfinite(accuracy[:task])) and np.all(np.isnan(accuracy[task:]))
    kept = [step for step in CHECKPOINT_STEPS if step <= expected_step][-2:]  # the last two
    # Killed while saving: the new checkpoint's files are on disk too, but the index does not name them.
    written = kept + [value] if mode == "save" else kept
    files = ["checkpoint"] + [f"ckpt-{step}.{ext}" for step in written for ext in ("data-00000-of-00001", "index")]
    assert sorted(os.listdir(out / "checkpoints")) == sorted(files)

    train_in_process(gcl_config, out, "--resume")  # the uninterrupted run ran in a process of its own
    resumed, uninterrupted = results_of(out), results_of(reference)
    assert resumed["resumed_from_step"] == expected_step and uninterrupted["resumed_from_step"] is None
    assert resumed["accuracy_matrix"] == uninterrupted["accuracy_matrix"]
    # Each task was evaluated once after each task: as many evaluated samples as without the kill.
    for key in ("train_steps", "eval_samples", "acc", "fgt", "bwt"):
        assert resumed[key] == uninterrupted[key], key
    # The final state (weights, Adam's moments, GCL's memory and edge logits) is bit-identical.
    assert_bit_identical(checkpoint_arrays(latest(out)), checkpoint_arrays(latest(reference)))
    assert latest(out).endswith("ckpt-24")


@pytest.mark.slow
def test_deterministic_runs_repeat_bit_for_bit_and_seeds_differ(gcl_config, reference, tmp_path):
    again = tmp_path / "again"
    other_seed = tmp_path / "seed1"
    train_in_process(gcl_config, again)  # in this process, the reference in one of its own: across processes
    train_in_process(gcl_config, other_seed, "--set", "seed=1")
    first, second = results_of(reference), results_of(again)
    assert first["deterministic"] is True and first["config"]["train"]["deterministic"] is True
    assert "deterministic: true" in (reference / "config.yaml").read_text()
    assert second["accuracy_matrix"] == first["accuracy_matrix"]
    a, b = checkpoint_arrays(latest(reference)), checkpoint_arrays(latest(again))
    assert_bit_identical(a, b)
    c = checkpoint_arrays(latest(other_seed))
    weights = [n for n in a if n.startswith("model/") or n.startswith("optimizer/")]
    assert any(a[n].tobytes() != c[n].tobytes() for n in weights if "memory" not in n)
    assert a["model/memory/images/.ATTRIBUTES/VARIABLE_VALUE"].tobytes() != \
        c["model/memory/images/.ATTRIBUTES/VARIABLE_VALUE"].tobytes()
    assert results_of(other_seed)["accuracy_matrix"] != first["accuracy_matrix"]


# ----------------------------------------------------------------------------- export and predict
@pytest.mark.slow
def test_export_and_predict_in_a_fresh_process_match_the_trained_model(reference, tmp_path):
    import tensorflow as tf
    from PIL import Image

    from gcl_tf import export, predict
    from gcl_tf.config import load_config
    from gcl_tf.data import make_source

    out = tmp_path / "exported"
    metadata = export.export(str(reference), str(out))
    assert metadata["method"] == "gcl" and metadata["uses_seed"] is True
    assert metadata["input_shape"] == [8, 8, 1] and metadata["num_classes"] == 10
    assert metadata["class_names"] == [str(d) for d in range(10)] and metadata["tasks_trained"] == 3
    with pytest.raises(Exception, match="exists"):
        export.export(str(reference), str(out))  # never replaced without overwrite
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith(".")) == []  # no staging folder left

    # Digit images as PNG files, and an RGB JPG of another size (converted and resized).
    test = make_source(load_config(str(reference / "config.yaml")).benchmark).load("test")
    paths = []
    for k in range(5):
        paths.append(str(tmp_path / f"digit{k}.png"))
        Image.fromarray(test.images[k, ..., 0], mode="L").save(paths[-1])
    paths.append(str(tmp_path / "photo.jpg"))
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (20, 30, 3), dtype=np.uint8)).save(paths[-1])
    images = predict.load_images(paths, (8, 8, 1))
    assert images.shape == (6, 8, 8, 1)
    np.testing.assert_array_equal(images[:5], test.images[:5].astype(np.float32) / 255.0)

    # The restored model (its memory as trained), predicting in this process.
    model, _, _ = export.load_run(str(reference))
    memory = checkpoint_arrays(latest(reference))
    for variable in model.memory.variables:
        name = variable.name.split(":")[0].split("/")[-1]
        np.testing.assert_array_equal(variable.numpy(), memory[f"model/memory/{name}/.ATTRIBUTES/VARIABLE_VALUE"])
    assert int(model.memory.num_filled.numpy()) == 20
    expected = export.class_probabilities(model, tf.constant(images), 7).numpy()
    assert not np.allclose(expected, export.class_probabilities(model, tf.constant(images), 8).numpy())

    # A fresh process: python -m gcl_tf.predict on the files, same seed.
    proc = python("-m", "gcl_tf.predict", str(out), *paths, "--seed", "7")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(paths)
    for path, line, row in zip(paths, lines, expected):
        name, label, probability = line.split("\t")
        assert name == path and label == str(int(np.argmax(row)))
        assert float(probability) == pytest.approx(float(row.max()), abs=2e-6)
    # The reloaded SavedModel gives the whole probability vectors.
    serve = tf.saved_model.load(str(out)).signatures["serving_default"]
    got = serve(images=tf.constant(images), seed=tf.constant(7, tf.int64))["probabilities"].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)

    # Bad input to predict: one line, exit status 2.
    (tmp_path / "notes.txt").write_text("not an image")
    proc = python("-m", "gcl_tf.predict", str(out), str(tmp_path / "notes.txt"))
    lines = [line for line in proc.stderr.splitlines() if not line.startswith(TF_DEVICE_LOG)]
    assert proc.returncode == 2 and len(lines) == 1 and "notes.txt" in lines[0], proc.stderr


# ----------------------------------------------------------------------------- every method, in process
def method_settings() -> dict:
    """Every registered method and the small settings its class declares (``test_settings``)."""
    from gcl_tf import methods

    return {name: methods.method_class(name).test_settings for name in methods.names()}


METHOD_SETTINGS = method_settings()


def test_every_registered_method_has_its_module_and_small_valid_test_settings():
    """The tests that run every method read ``methods.names()``, which skips a registry entry whose
    module is missing: every entry has its module (none is left out of them quietly). Each class's
    ``test_settings`` are keys of its Config with allowed values (checked as a config's are) and
    keep the runs small: a memory of at most 20 samples."""
    import importlib.util

    from gcl_tf import methods
    from gcl_tf.schema import build_dataclass

    for name, (module, _, _) in methods.REGISTRY.items():
        assert importlib.util.find_spec(module) is not None, name
        settings = methods.method_class(name).test_settings
        built = build_dataclass(methods.config_class(name), settings, f"{name}.test_settings")
        assert getattr(built, "memory_size", 0) <= 20, name


class Crash(Exception):
    pass


def small_config(make_config, method, **train):
    settings = {"train": {"epochs": 2, "checkpoint_every": 4, **train},
                "benchmark": {"num_tasks": 2, "samples_per_task": 30, "test_samples_per_task": 30},
                "method": {"name": method, **METHOD_SETTINGS[method]}}
    if method == "gcl":
        settings["train"].update(optimizer="adam", learning_rate=0.003)
    return make_config(settings)


@pytest.mark.parametrize("method", list(METHOD_SETTINGS))
@pytest.mark.slow
def test_every_method_resumes_exactly_and_exports(method, make_config, monkeypatch, tmp_path):
    """2 tasks x 2 epochs x 3 batches (steps 1-6, 7-12); checkpoints at 4, 6, 8, 12. A crash after
    step 10 resumes from step 8 (task 2, mid-epoch) and ends as the uninterrupted run, task-end
    state included (EWC's consolidations, iCaRL's exemplars from the whole task stream)."""
    import tensorflow as tf

    from gcl_tf import callbacks, export, train

    config = small_config(make_config, method)
    whole = train.run(config, output_dir=str(tmp_path / "whole"), verbose=0)

    after_batch = callbacks.PeriodicCheckpoint.on_train_batch_end

    def crash_after_step_10(self, batch, logs=None):
        if self.step + self._per_call == 10:
            raise Crash()
        return after_batch(self, batch, logs)

    monkeypatch.setattr(callbacks.PeriodicCheckpoint, "on_train_batch_end", crash_after_step_10)
    with pytest.raises(Crash):
        train.run(config, output_dir=str(tmp_path / "crashed"), verbose=0)
    monkeypatch.setattr(callbacks.PeriodicCheckpoint, "on_train_batch_end", after_batch)
    assert latest(tmp_path / "crashed").endswith("ckpt-8")
    resumed = train.run(config, output_dir=str(tmp_path / "crashed"), verbose=0, resume=True)
    assert resumed["resumed_from_step"] == 8
    assert resumed["accuracy_matrix"] == whole["accuracy_matrix"]
    assert resumed["eval_samples"] == whole["eval_samples"]
    assert_bit_identical(checkpoint_arrays(latest(tmp_path / "crashed")), checkpoint_arrays(latest(tmp_path / "whole")))

    # Export through the generic path, reload, compare with the restored model.
    out = tmp_path / "exported"
    metadata = export.export(str(tmp_path / "whole"), str(out))
    assert metadata["method"] == method and metadata["uses_seed"] == (method == "gcl")
    model, _, _ = export.load_run(str(tmp_path / "whole"))
    x = tf.random.stateless_uniform([7, 8, 8, 1], seed=[1, 2])
    expected = export.class_probabilities(model, x, 3).numpy()
    got = tf.saved_model.load(str(out)).signatures["serving_default"](
        images=x, seed=tf.constant(3, tf.int64))["probabilities"].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert got.shape == (7, 10)


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


def test_nan_loss_stops_training_names_the_step_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    """2 tasks of 10 steps, checkpoints every 5 steps: the loss turns NaN at step 13 (task 2,
    batch 3); the check before the checkpoint of step 15 stops the run; ckpt-10 stays the latest."""
    import tensorflow as tf

    from gcl_tf import methods

    learn = methods.method_class("finetune").learn

    def learn_nan_from_step_13(self, x, y):
        logs = learn(self, x, y)
        logs["loss"] = tf.where(self.step_counter >= 12, tf.constant(float("nan")), logs["loss"])
        return logs

    monkeypatch.setattr(methods.method_class("finetune"), "learn", learn_nan_from_step_13)
    config = write_config(tmp_path, {"benchmark": {"num_tasks": 2}, "train": {"checkpoint_every": 5}})
    out = tmp_path / "run"
    message = cli_error(["--config", config, "--output", str(out)], capsys)
    assert "step 13 (task 2, batch 3 of the task)" in message and "NaN" in message
    assert "last good checkpoint (step 10)" in message
    assert latest(out).endswith("ckpt-10")
    saved = checkpoint_arrays(latest(out))
    for name, value in saved.items():
        if name.startswith(("model/", "optimizer/")):
            assert np.all(np.isfinite(value)), name
    assert int(saved["progress/task/.ATTRIBUTES/VARIABLE_VALUE"]) == 1
    assert not (out / "results.json").exists()


def test_a_diverging_learning_rate_is_one_line_and_no_checkpoint_holds_nan(tmp_path, capsys):
    config = write_config(tmp_path, {"benchmark": {"num_tasks": 2},
                                     "train": {"learning_rate": 1e30, "checkpoint_every": 1}})
    out = tmp_path / "run"
    message = cli_error(["--config", config, "--output", str(out)], capsys)
    assert "diverged" in message and "at step" in message and "(task 1," in message
    path = latest(out)
    if path is not None:
        for name, value in checkpoint_arrays(path).items():
            if name.startswith(("model/", "optimizer/")):
                assert np.all(np.isfinite(value)), name
    assert not (out / "results.json").exists()


# ----------------------------------------------------------------------------- atomic writes
def test_an_interrupted_atomic_write_keeps_the_previous_file(tmp_path, monkeypatch):
    from gcl_tf import io

    path = tmp_path / "results.json"
    io.write_json_atomic(str(path), {"acc": 1.0})
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk unplugged")

    for target, kind in ((os, "replace"), (os, "fsync")):  # before the rename; half-way through the write
        monkeypatch.setattr(target, kind, crash)
        with pytest.raises(OSError):
            io.write_json_atomic(str(path), {"acc": 2.0, "rows": list(range(10000))})
        monkeypatch.undo()
        assert path.read_bytes() == before
        assert os.listdir(tmp_path) == ["results.json"]  # no temporary file left
    with pytest.raises(TypeError):  # the serialiser fails: nothing is written
        io.write_json_atomic(str(path), {"acc": object()})
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["results.json"]


def test_atomic_writes_get_the_permissions_of_a_plain_write(tmp_path):
    """Files written atomically are readable as a plain open() would leave them (umask applies),
    not private like the temporary file they start as."""
    from gcl_tf import io

    old = os.umask(0o022)
    try:
        io.write_json_atomic(str(tmp_path / "a.json"), {"acc": 1.0})
        os.umask(0o077)
        io.write_atomic(str(tmp_path / "b.md"), "text")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.md").stat().st_mode & 0o777 == 0o600


def test_a_run_leaves_op_determinism_as_it_found_it(tmp_path, monkeypatch):
    """train.deterministic turns TensorFlow's process-wide op determinism on for the run; a later run
    in the same process (a notebook, the next trial of a search) is not made deterministic by it, and
    a process the user made deterministic stays so."""
    from tensorflow.python.framework import config as tf_config

    from gcl_tf import train
    from gcl_tf.config import resolve

    tiny = {"benchmark": {"num_tasks": 1, "samples_per_task": 20}}
    seen = []
    real = train.train_model

    def record(*args, **kwargs):
        seen.append(tf_config.is_op_determinism_enabled())
        out = real(*args, **kwargs)
        seen.append(tf_config.is_op_determinism_enabled())
        return out

    monkeypatch.setattr(train, "train_model", record)
    deterministic = resolve(_deep_update(TINY, {**tiny, "train": {"deterministic": True}}))
    try:
        assert not tf_config.is_op_determinism_enabled()
        train.run(deterministic, str(tmp_path / "a"), verbose=0)
        assert seen == [False, True] and not tf_config.is_op_determinism_enabled()
        tf_config.enable_op_determinism()
        train.run(resolve(_deep_update(TINY, tiny)), str(tmp_path / "b"), verbose=0)
        assert tf_config.is_op_determinism_enabled()
    finally:
        tf_config.disable_op_determinism()


def test_train_writes_results_through_the_atomic_writer(tmp_path, monkeypatch):
    from gcl_tf import task_loop, train

    written = []
    real = train.write_json_atomic
    for module in (train, task_loop):  # model.json at the start, results.json at the end
        monkeypatch.setattr(module, "write_json_atomic", lambda path, obj: (written.append(os.path.basename(path)),
                                                                               real(path, obj)))
    config = _deep_update(TINY, {"benchmark": {"num_tasks": 1, "samples_per_task": 20}})
    from gcl_tf.config import resolve

    train.run(resolve(config), output_dir=str(tmp_path / "run"), verbose=0)
    assert written == ["model.json", "results.json"]
    assert not [p for p in os.listdir(tmp_path / "run") if p.startswith(".")]


@pytest.mark.slow
def test_a_runs_saved_config_names_its_output_folder_and_resumes_there(tmp_path, monkeypatch):
    """config.yaml (and results.json) record the --output used, not the config file's output_dir,
    so ``--config RUN/config.yaml --resume`` continues RUN itself."""
    import yaml

    from gcl_tf import callbacks, train

    elsewhere = tmp_path / "elsewhere"
    config = write_config(tmp_path, {"output_dir": str(elsewhere),
                                     "benchmark": {"num_tasks": 2, "samples_per_task": 20}})
    out = tmp_path / "run"
    after_task = callbacks.TaskEndEvaluation.on_train_end

    def stop(self, logs=None):
        after_task(self, logs)
        if self.task_index == 1:  # after task 2's evaluation, before its checkpoint: task 1's is the last
            raise Crash()

    monkeypatch.setattr(callbacks.TaskEndEvaluation, "on_train_end", stop)
    with pytest.raises(Crash):
        train.main(["--config", config, "--output", str(out)])
    monkeypatch.setattr(callbacks.TaskEndEvaluation, "on_train_end", after_task)
    assert yaml.safe_load((out / "config.yaml").read_text())["output_dir"] == str(out)
    assert train.main(["--config", str(out / "config.yaml"), "--resume"]) == 0
    results = results_of(out)
    assert results["resumed_from_step"] == 2 and results["config"]["output_dir"] == str(out)
    assert not elsewhere.exists()


@pytest.mark.slow
def test_a_gcl_run_saved_before_the_defaults_changed_resumes_reruns_exports_and_seeds_runs_as_it_ran(
        tmp_path, monkeypatch, capsys):
    """GCL's own_latent / target_loss became true / present (issue 33); a run folder saved before holds
    neither key in its config.yaml and ran the paper's head. ``--config RUN/config.yaml --resume``
    continues it, the same file as ``--config`` of a new run trains that head again, export restores it,
    and --init-from accepts a config naming that head and refuses one with today's defaults, naming the
    key. A user's own config without the keys still gets today's defaults."""
    import yaml

    from gcl_tf import callbacks, export, train

    paper_head = {"name": "gcl", "memory_size": 20, "test_graph_samples": 2, "own_latent": False,
                  "target_loss": "all"}
    config = write_config(tmp_path, {"method": paper_head, "benchmark": {"num_tasks": 2, "samples_per_task": 20},
                                     "train": {"deterministic": True}})
    out = tmp_path / "run"
    after_task = callbacks.TaskEndEvaluation.on_train_end

    def stop(self, logs=None):
        after_task(self, logs)
        if self.task_index == 1:
            raise Crash()

    monkeypatch.setattr(callbacks.TaskEndEvaluation, "on_train_end", stop)
    with pytest.raises(Crash):
        train.main(["--config", config, "--output", str(out)])
    monkeypatch.setattr(callbacks.TaskEndEvaluation, "on_train_end", after_task)
    saved = yaml.safe_load((out / "config.yaml").read_text())
    del saved["method"]["own_latent"], saved["method"]["target_loss"]  # as a run saved before wrote it
    (out / "config.yaml").write_text(yaml.safe_dump(saved))

    assert train.main(["--config", str(out / "config.yaml"), "--output", str(out), "--resume"]) == 0
    results = results_of(out)
    assert results["resumed_from_step"] == 2
    assert results["config"]["method"]["own_latent"] is False and results["config"]["method"]["target_loss"] == "all"
    model, _, _ = export.load_run(str(out))
    assert model.own_head is None and model.settings.target_loss == "all"

    (out / "config.yaml").write_text(yaml.safe_dump(saved))  # a finished run saved before, rerun elsewhere
    assert train.main(["--config", str(out / "config.yaml"), "--output", str(tmp_path / "again")]) == 0
    again = results_of(tmp_path / "again")
    assert again["config"]["method"]["own_latent"] is False and again["config"]["method"]["target_loss"] == "all"
    assert again["acc"] == results["acc"]  # the same run, trained again from its start

    later = write_config(tmp_path, {"method": paper_head}, "later.yaml")
    assert train.main(["--config", later, "--output", str(tmp_path / "later"), "--init-from", str(out)]) == 0
    user = {k: v for k, v in paper_head.items() if k not in ("own_latent", "target_loss")}
    mine = write_config(tmp_path, {"method": user}, "mine.yaml")
    message = cli_error(["--config", mine, "--output", str(tmp_path / "mine"), "--init-from", str(out)], capsys)
    assert "init_from: the config changes what the learner" in message and "method.own_latent" in message, message


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
        return update, "labels outside the class range"
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


@pytest.fixture
def finished_run(tmp_path):
    """A run folder as a finished run leaves it (contents do not matter here)."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for name, text in (("results.json", '{"acc": 50.0}\n'), ("config.yaml", "seed: 0\n"), ("model.json", "{}\n"),
                       ("checkpoints/checkpoint", 'model_checkpoint_path: "ckpt-30"\n')):
        (run / name).write_text(text)
    return run


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_one_line_exit_2_and_overwrites_nothing(case, tmp_path, finished_run, capsys):
    update, expected = bad_input(case, tmp_path)
    if isinstance(update, str):
        config = tmp_path / "bad.yaml"
        config.write_text(update)
    else:
        config = write_config(tmp_path, update, "bad.yaml")
    before = snapshot(finished_run)
    message = cli_error(["--config", str(config), "--output", str(finished_run), "--overwrite"], capsys)
    assert expected in message, message
    assert snapshot(finished_run) == before


@pytest.mark.slow
def test_resume_needs_a_checkpoint_and_the_same_config(tmp_path, finished_run, capsys):
    config = write_config(tmp_path, {"benchmark": {"num_tasks": 2, "samples_per_task": 20},
                                     "train": {"checkpoint_every": 1}})
    out = tmp_path / "new"
    assert "no checkpoint to resume from" in cli_error(["--config", config, "--output", str(out), "--resume"], capsys)
    assert not out.exists()
    assert "nothing to resume" in cli_error(["--config", config, "--output", str(finished_run), "--resume"], capsys)
    (finished_run / "results.json").unlink()
    (finished_run / "config.yaml").unlink()
    (finished_run / "checkpoints" / "ckpt-30.index").write_text("")
    message = cli_error(["--config", config, "--output", str(finished_run), "--resume"], capsys)
    assert "config.yaml is missing" in message

    # A run stopped after its first task (its checkpoint), resumed with another learning rate or
    # another seed: refused, naming the key; with another verbosity or checkpoint cadence: fine.
    from gcl_tf import callbacks, train

    after_task = callbacks.TaskEndEvaluation.on_train_end

    def stop(self, logs=None):
        after_task(self, logs)
        if self.task_index == 1:
            raise Crash()

    callbacks.TaskEndEvaluation.on_train_end = stop
    try:
        with pytest.raises(Crash):
            train.main(["--config", config, "--output", str(out)])
    finally:
        callbacks.TaskEndEvaluation.on_train_end = after_task
    before = snapshot(out)
    message = cli_error(["--config", config, "--output", str(out), "--resume", "--set", "train.learning_rate=0.5"],
                        capsys)
    assert "differs" in message and "train.learning_rate (0.1 -> 0.5)" in message
    message = cli_error(["--config", config, "--output", str(out), "--resume", "--set", "seed=3"], capsys)
    assert "seed (0 -> 3)" in message
    assert snapshot(out) == before
    assert train.main(["--config", config, "--output", str(out), "--resume", "--set", "train.checkpoint_every=0",
                       "--set", "train.verbose=0"]) == 0
    assert results_of(out)["resumed_from_step"] == 3  # task 2's first step (its end was not saved)
