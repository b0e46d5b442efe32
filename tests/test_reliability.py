"""A killed run resumes to the same results, bit for bit where determinism is on; a run exports and
predicts in a fresh process as trained; every method resumes exactly and exports."""
from __future__ import annotations

import os
import signal

import numpy as np
import pytest
from reliability_harness import (
    CHECKPOINT_STEPS,
    GCL_RUN,
    KILLER,
    KILLS,
    METHOD_SETTINGS,
    TF_DEVICE_LOG,
    Crash,
    assert_bit_identical,
    checkpoint_arrays,
    completed_run,
    config_file,
    latest,
    python,
    results_of,
    small_config,
    train_in_process,
)


@pytest.fixture(scope="module")
def gcl_config(tmp_path_factory):
    return config_file(tmp_path_factory, GCL_RUN, "gcl.yaml")


@pytest.fixture(scope="module")
def reference(gcl_config, tmp_path_factory):
    """The uninterrupted deterministic run."""
    return completed_run(gcl_config, tmp_path_factory.mktemp("reference") / "run")


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

