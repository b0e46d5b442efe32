"""A learner saved whole and learning on later: model.save / gcl_tf.load_model for every method,
a fresh process, and runs that start from a finished run's learner (init_from, --init-from)."""
import inspect
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import yaml
from reliability_harness import completed_run, train_in_process

import gcl_tf
from gcl_tf import methods, saving

from conftest import REPO

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def digits(task: int, n: int = 60):
    """``n`` scikit-learn digits (uint8 [n, 8, 8, 1]) with their pixels permuted for ``task``."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = np.round(data.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    order = np.random.default_rng(task).permutation(64)
    images = images.reshape(len(images), 64)[:, order].reshape(images.shape)
    start = 100 * task
    return images[start:start + n], data.target[start:start + n]


def stream(task: int):
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(digits(task)).batch(10)


def make(name: str):
    import keras

    cls = methods.method_class(name)
    accepted = inspect.signature(cls.__init__).parameters
    kwargs = dict(num_classes=10, input_shape=(8, 8, 1), batch_size=10, seed=3)
    if "memory_size" in accepted:
        kwargs["memory_size"] = 40
    if "num_tasks" in accepted:
        kwargs["num_tasks"] = 3
    if name == "gcl":
        kwargs["hidden_size"] = 32
    model = cls(**kwargs)
    model.compile(optimizer=keras.optimizers.SGD(0.05) if name == "mer" else keras.optimizers.Adam(1e-3))
    return model


def everything(model) -> dict:
    """Every array the learner holds: weights, optimizer variables and the method state."""
    out = {f"weight {v.path}": v.numpy() for v in model.weights}
    out.update({f"optimizer {v.path}": v.numpy() for v in model.optimizer.variables})
    out.update({f"state {k}": v.numpy() for k, v in saving.method_state(model).items()})
    return out


def assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    different = [k for k in a if not np.array_equal(a[k], b[k])]
    assert not different, different[:5]


def predictions(model, images):
    with model.evaluation_scope():
        return model.predict(images, batch_size=20, verbose=0)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "mer" else n
                                  for n in methods.names()])  # every registered method
def test_every_method_saves_whole_and_goes_on_as_if_never_saved(name, tmp_path):
    """Train a task, save, load: the loaded learner holds the same weights, optimizer state and
    memory, predicts the same, and after one more task on both, they are still equal."""
    model = make(name)
    model.fit(stream(0), verbose=0)
    path = str(tmp_path / "learner.keras")
    model.save(path)
    loaded = gcl_tf.load_model(path)
    assert type(loaded) is type(model) and loaded.get_config() == model.get_config()
    assert_same(everything(model), everything(loaded))
    test_images = digits(1, 40)[0]
    np.testing.assert_array_equal(predictions(model, test_images), predictions(loaded, test_images))
    model.fit(stream(1), verbose=0)  # fit's own task boundary: the next task on both
    loaded.fit(stream(1), verbose=0)
    assert int(loaded.next_task.numpy()) == 2
    assert_same(everything(model), everything(loaded))


def test_the_method_state_is_every_variable_keras_does_not_save():
    gcl = make("gcl")
    state = saving.method_state(gcl)
    for key in ("memory.images", "memory.labels", "memory.num_seen", "memory.best_loss", "memory.edge_logits",
                "step_counter", "next_task"):
        assert key in state, sorted(state)
    keras_variables = {id(v.value) for v in gcl.weights} | {id(v.value) for v in gcl.optimizer.variables}
    assert not keras_variables & {id(v) for v in state.values()}
    ewc, icarl = saving.method_state(make("ewc")), saving.method_state(make("icarl"))
    assert any(k.startswith("ewc.") for k in ewc) and "task_classes.masks" in ewc, sorted(ewc)
    assert {"exemplars.images", "exemplars.class_means"} <= set(icarl), sorted(icarl)


def test_a_state_that_does_not_fit_is_an_error_naming_it():
    model = make("er")
    store = {saving.STATE_PREFIX + k: v.numpy() for k, v in saving.method_state(model).items()}
    del store[saving.STATE_PREFIX + "memory.images"]
    with pytest.raises(ValueError, match="missing \\['memory.images'\\]"):
        saving.load_state(model, store)
    store[saving.STATE_PREFIX + "memory.images"] = np.zeros([3, 8, 8, 1], np.float32)
    with pytest.raises(ValueError, match="memory.images has shape"):
        saving.load_state(model, store)


def saved_gcl_learner(tmp_path):
    """A GCL learner after one task, saved to ``tmp_path/learner.keras``, and test images also
    saved (``images.npy``) for a second process: (model, path, images)."""
    model = make("gcl")
    model.fit(stream(0), verbose=0)
    path = tmp_path / "learner.keras"
    model.save(str(path))
    images = digits(2, 40)[0]
    np.save(tmp_path / "images.npy", images)
    return model, path, images


@pytest.mark.slow  # a second process
def test_a_saved_learner_loads_in_a_fresh_process_with_keras_load_model(tmp_path):
    """In a new process, keras.models.load_model (the class imported) gives the same predictions
    and, after one more task, the same learner as the process that saved it."""
    import keras

    model, path, images = saved_gcl_learner(tmp_path)
    script = f"""
import numpy as np, keras, tensorflow as tf
from gcl_tf import GCL  # registers the class with Keras
from gcl_tf import saving
model = keras.models.load_model({str(path)!r})
images = np.load({str(tmp_path / 'images.npy')!r})
with model.evaluation_scope():
    before = model.predict(images, batch_size=20, verbose=0)
from sklearn.datasets import load_digits
data = load_digits()
x = np.round(data.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
x = x.reshape(len(x), 64)[:, np.random.default_rng(1).permutation(64)].reshape(x.shape)[100:160]
model.fit(tf.data.Dataset.from_tensor_slices((x, data.target[100:160])).batch(10), verbose=0)
np.savez({str(tmp_path / 'out.npz')!r}, before=before, **{{v.path: v.numpy() for v in model.weights}},
         **{{'state ' + k: v.numpy() for k, v in saving.method_state(model).items()}})
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, env=ENV,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(out["before"], predictions(model, images))
    model.fit(stream(1), verbose=0)
    for v in model.weights:
        np.testing.assert_array_equal(out[v.path], v.numpy(), err_msg=v.path)
    for k, v in saving.method_state(model).items():
        np.testing.assert_array_equal(out["state " + k], v.numpy(), err_msg=k)
    assert isinstance(keras.models.load_model(str(path)), gcl_tf.GCL)


@pytest.mark.slow  # a second process
@pytest.mark.parametrize("imports", ["import gcl_tf\nimport keras", "import keras\nimport gcl_tf"],
                         ids=["gcl_tf-first", "keras-first"])
def test_keras_load_model_needs_only_import_gcl_tf(tmp_path, imports):
    """In a new process, ``import gcl_tf`` (before or after ``import keras``) is all that
    ``keras.models.load_model`` needs: the learner's class loads on first use, predicts as the
    saved one, and TensorFlow is not imported by ``import gcl_tf`` itself."""
    from helpers import TF_STARTUP_LOG, without_tf_log_level

    model, path, images = saved_gcl_learner(tmp_path)
    script = f"""{imports}
import sys
import numpy as np
assert ('tensorflow' in sys.modules) == ('keras' in sys.modules), 'import gcl_tf imported TensorFlow'
model = keras.models.load_model({str(path)!r})
assert type(model) is gcl_tf.GCL, type(model)
with model.evaluation_scope():
    np.save({str(tmp_path / 'out.npy')!r}, model.predict(np.load({str(tmp_path / 'images.npy')!r}), batch_size=20,
                                                          verbose=0))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO,
                          env=without_tf_log_level(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), predictions(model, images))
    if imports.startswith("import gcl_tf"):  # TensorFlow imported after gcl_tf: quietly
        assert not TF_STARTUP_LOG.search(proc.stderr), proc.stderr[-3000:]


# ----------------------------------------------------------------------------- the CLI: --init-from
RUN = {
    "seed": 0,
    "benchmark": {"name": "permuted", "dataset": "digits", "source": "digits", "num_tasks": 4,
                  "samples_per_task": 300, "test_samples_per_task": 100},
    "model": {"backbone": "mlp", "hidden_size": 32},
    "train": {"batch_size": 10, "optimizer": "adam", "learning_rate": 0.003, "verbose": 0, "log_every": 0,
              "checkpoint_every": 0},
    "eval": {"batch_size": 100},
}
METHOD = {
    "gcl": {"name": "gcl", "memory_size": 60, "graph_lambda": 1.0, "context_temperature": 0.3,
            "target_temperature": 1.0, "context_lambda": 2.0},
    "er": {"name": "er", "memory_size": 60},
    # task-aware: EWC's Fisher and anchors carry over; A-GEM's memory is per task index
    "ewc": {"name": "ewc", "ewc_lambda": 10.0},
    "agem": {"name": "agem", "memory_size": 60, "agem_batch_size": 20},
}


def write_config(tmp_path, method: str, **benchmark) -> str:
    config = json.loads(json.dumps(RUN))
    config["method"] = METHOD[method]
    config["benchmark"].update(benchmark)
    path = tmp_path / f"{method}-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["gcl", "er", "ewc", "agem"])
def test_tasks_learned_in_two_runs_equal_one_run_bit_for_bit(method, tmp_path):
    """Tasks 1-2 in one run, tasks 3-4 in another process from its learner (--init-from): the second
    run's accuracy matrix, weights, optimizer state and memory are those of one run over 1-4 (the
    whole run and the first in this process, as the command's main, each after a cleared Keras
    session so that Keras names their variables as the later run's fresh process does: two
    TensorFlow start-ups fewer)."""
    import keras

    whole = write_config(tmp_path, method)
    first = write_config(tmp_path, method, tasks=[0, 1])
    later = write_config(tmp_path, method, tasks=[2, 3])
    for name, config in (("whole", whole), ("first", first)):
        keras.backend.clear_session()  # Keras names the variables as in a fresh process
        train_in_process(config, tmp_path / name)
    completed_run(later, tmp_path / "later", "--init-from", str(tmp_path / "first"))
    result = {name: json.loads((tmp_path / name / "results.json").read_text()) for name in ("whole", "first", "later")}
    R = np.asarray(result["whole"]["accuracy_matrix"])
    assert R[-1, :].mean() > 25.0, R  # it learned something: the equality is not one of chance levels
    np.testing.assert_array_equal(np.asarray(result["first"]["accuracy_matrix"]), R[:2, :2])
    np.testing.assert_array_equal(np.asarray(result["later"]["accuracy_matrix"]), R[2:, 2:])
    assert result["later"]["init_from"] == {"run": str(tmp_path / "first"), "tasks_before": 2,
                                            "steps_before": result["first"]["train_steps"]}
    assert result["later"]["train_steps"] + result["first"]["train_steps"] == result["whole"]["train_steps"]
    assert_same(everything(gcl_tf.load_model(str(tmp_path / "whole" / "learner.keras"))),
                everything(gcl_tf.load_model(str(tmp_path / "later" / "learner.keras"))))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished ER run and a finished EWC run of two tasks (num_tasks 2), in process."""
    from gcl_tf import config as config_lib
    from gcl_tf import train

    folder = tmp_path_factory.mktemp("finished")
    runs = {}
    for method in ("er", "ewc"):
        raw = json.loads(json.dumps(RUN))
        raw["method"] = METHOD[method]
        raw["benchmark"].update(num_tasks=2, samples_per_task=30, test_samples_per_task=20)
        path = folder / f"{method}.yaml"
        path.write_text(yaml.safe_dump(raw))
        train.run(config_lib.load_config(str(path)), output_dir=str(folder / method), verbose=0)
        runs[method] = (str(path), str(folder / method))
    return runs


def refusal(capsys, argv) -> str:
    from gcl_tf import train

    with pytest.raises(SystemExit) as stop:
        train.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("change, named", [
    ("benchmark.num_classes=12", "the data's classes (10 -> 12)"),
    ("method.name=gcl", "method.name ('er' -> 'gcl')"),
    ("model.backbone=convnet", "model.backbone ('mlp' -> 'convnet')"),
    ("method.memory_size=20", "method.memory_size (60 -> 20)"),
    ("model.hidden_size=16", "model.hidden_size (32 -> 16)"),
    ("train.optimizer=sgd", "train.optimizer ('adam' -> 'sgd')"),
])
def test_a_learner_of_another_kind_is_refused_in_one_line_naming_the_difference(change, named, finished, tmp_path,
                                                                                capsys):
    config, run_dir = finished["er"]
    line = refusal(capsys, ["--config", config, "--output", str(tmp_path / "new"), "--init-from", run_dir,
                            "--set", change])
    assert line.startswith("error: init_from: the config changes what the learner") and named in line, line
    assert not (tmp_path / "new").exists()


def test_init_from_refuses_what_is_not_a_finished_run_and_a_task_aware_learner_without_room(finished, tmp_path,
                                                                                           capsys):
    config, run_dir = finished["er"]
    (tmp_path / "empty").mkdir()
    empty = str(tmp_path / "empty")
    line = refusal(capsys, ["--config", config, "--output", str(tmp_path / "a"), "--init-from", empty])
    assert "holds no learner.keras" in line, line
    line = refusal(capsys, ["--config", config, "--output", run_dir, "--init-from", run_dir, "--overwrite"])
    assert "this run's own output folder" in line, line
    ewc_config, ewc_dir = finished["ewc"]  # EWC built for 2 tasks, both begun: no room for more
    line = refusal(capsys, ["--config", ewc_config, "--output", str(tmp_path / "b"), "--init-from", ewc_dir,
                            "--set", "benchmark.tasks=[1]"])
    assert "has room for 2 tasks" in line and "has begun 2" in line, line
    line = refusal(capsys, ["--config", config, "--output", str(tmp_path / "c"), "--set", "benchmark.tasks=[0,2]"])
    assert line.startswith("error: benchmark.tasks: 2 is not a task of the 2"), line


def test_a_finished_run_writes_its_learner_and_a_later_run_learns_from_it(finished, tmp_path, capsys):
    """The learner of a finished run loads with its memory; a run from it on another stream
    (rotated digits) keeps learning: its task indices follow the learner's."""
    from gcl_tf import api

    config, run_dir = finished["er"]
    learner = gcl_tf.load_model(os.path.join(run_dir, "learner.keras"))
    assert int(learner.memory.num_seen.numpy()) == 60 and int(learner.next_task.numpy()) == 2
    results = api.run(config, output_dir=str(tmp_path / "later"), verbose=2, init_from=run_dir,
                      benchmark={"name": "rotated", "num_tasks": 1}, **{"train.learning_rate": 0.01})
    assert (f"Starting from the learner of {run_dir}: 2 tasks and 6 steps behind it; this run's task 1 is its "
            "task 3") in capsys.readouterr().out
    assert results["init_from"]["tasks_before"] == 2 and results.accuracy_matrix.shape == (1, 1)
    later = gcl_tf.load_model(str(tmp_path / "later" / "learner.keras"))
    assert int(later.memory.num_seen.numpy()) == 60 + 30 and int(later.next_task.numpy()) == 3
    assert int(later.optimizer.iterations.numpy()) == int(learner.optimizer.iterations.numpy()) + 3
    assert float(learner.optimizer.learning_rate.numpy()) == pytest.approx(0.003)
    assert float(later.optimizer.learning_rate.numpy()) == pytest.approx(0.01)  # the new run's


@pytest.mark.parametrize("backbone, method", [("convnet", "gcl"), ("convnet", "icarl"), ("resnet18", "er")])
def test_the_cli_backbones_under_mixed_precision_save_and_load(backbone, method, tmp_path):
    """The library's own layers (the fused BatchNormalization) are registered with Keras, and a
    learner built under a mixed-precision policy loads under it (its dtype policy is saved)."""
    from gcl_tf import config as config_lib

    config = config_lib.resolve({
        "benchmark": {"name": "split", "dataset": "digits", "source": "digits", "num_tasks": 5},
        "method": {"name": method, "memory_size": 20}, "model": {"backbone": backbone, "filters": 4},
        "train": {"mixed_precision": "mixed_bfloat16"}, "eval": {"batch_size": 4}})
    model = methods.build(config, (32, 32, 3), 10)
    model.compile_for_training(config.train)
    model.save(str(tmp_path / "learner.keras"))
    loaded = gcl_tf.load_model(str(tmp_path / "learner.keras"))
    assert loaded.get_config()["dtype_policy"] == "mixed_bfloat16"
    assert any(layer.dtype_policy.name == "mixed_bfloat16" for layer in loaded._flatten_layers())
    images = np.random.default_rng(0).random((4, 32, 32, 3)).astype(np.float32)
    np.testing.assert_array_equal(predictions(loaded, images), predictions(model, images))


def test_a_failed_learner_write_is_one_line_and_leaves_no_partial_file(tmp_path, monkeypatch):
    import errno

    from gcl_tf import learner
    from gcl_tf.errors import DiskError

    model = make("er")
    learner.write_learner(model, str(tmp_path))
    before = (tmp_path / "learner.keras").read_bytes()
    real_save = type(model).save

    def full_disk(self, path, *args, **kwargs):
        real_save(self, path, *args, **kwargs)  # a partial file is there when the disk fills
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(model), "save", full_disk)
    with pytest.raises(DiskError, match="cannot write .*learner.keras: No space left on device") as error:
        learner.write_learner(model, str(tmp_path))
    assert "\n" not in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["learner.keras"]
    assert (tmp_path / "learner.keras").read_bytes() == before


def test_a_run_from_a_learner_resumes_with_its_task_offset_and_first_step(finished, tmp_path):
    """Where the learner started is saved with the run's checkpoints: a resumed run reports the
    same ``init_from`` and counts only its own steps."""
    from gcl_tf import api

    config, run_dir = finished["er"]
    out = tmp_path / "later"
    first = api.run(config, output_dir=str(out), verbose=0, init_from=run_dir, benchmark={"num_tasks": 4,
                                                                                          "tasks": [2, 3]})
    os.unlink(out / "results.json")  # as if stopped after its last checkpoint
    again = api.run(config, output_dir=str(out), verbose=0, init_from=run_dir, resume=True,
                    benchmark={"num_tasks": 4, "tasks": [2, 3]})
    steps = 2 * 30 // 10  # two tasks of 30 samples, batch 10, before and now
    assert again["resumed_from_step"] == steps + steps
    assert again["init_from"] == first["init_from"] == {"run": run_dir, "tasks_before": 2, "steps_before": steps}
    assert again["train_steps"] == first["train_steps"] == steps
    np.testing.assert_array_equal(again.accuracy_matrix, first.accuracy_matrix)


def test_a_run_from_a_learner_on_some_tasks_exports_and_a_damaged_one_is_named_in_one_line(finished, tmp_path):
    """Issue 24: the export of a run started from a learner (init_from) on a subset of the tasks
    (benchmark.tasks) sizes the run's progress record by the tasks it trains, as the run did (not
    by benchmark.num_tasks), and predicts as the run's learner; a checkpoint that does not restore
    is named in one line that speaks of RUN_DIR, not of --resume."""
    import tensorflow as tf

    from gcl_tf import api, export
    from gcl_tf.checkpoint import latest_checkpoint
    from gcl_tf.errors import UserError

    config, run_dir = finished["er"]
    later = tmp_path / "later"
    api.run(config, output_dir=str(later), verbose=0, init_from=run_dir, benchmark={"num_tasks": 4, "tasks": [2, 3]})
    metadata = export.export(str(later), str(tmp_path / "exported"))
    assert metadata["tasks_trained"] == metadata["num_tasks"] == 2
    learner = gcl_tf.load_model(str(later / "learner.keras"))
    images = tf.constant(digits(3, 20)[0].astype(np.float32) / 255.0)
    model, _, _ = export.load_run(str(later))
    np.testing.assert_allclose(export.class_probabilities(model, images, 0).numpy(),
                               export.class_probabilities(learner, images, 0).numpy(), rtol=1e-6, atol=1e-7)
    data = latest_checkpoint(str(later)) + ".data-00000-of-00001"
    with open(data, "r+b") as handle:
        handle.truncate(16)
    with pytest.raises(UserError) as error:
        export.load_run(str(later))
    message = str(error.value)
    assert message.startswith("RUN_DIR: cannot restore") and "--resume" not in message and "\n" not in message
