"""The Python API: methods built from keywords with a user's backbone and tf.data stream, fit per
task (task boundaries included), gcl_tf.benchmarks and gcl_tf.run."""
import inspect
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

import gcl_tf
from gcl_tf import methods
from gcl_tf.errors import ConfigError


def digits(task: int = 0, n: int = 300):
    """``n`` scikit-learn digits (uint8 [n, 8, 8, 1], int64 labels), pixels permuted for ``task``."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = np.round(data.images * (255.0 / 16.0)).astype(np.uint8)[..., None][:n]
    if task:
        order = np.random.default_rng(task).permutation(64)
        images = images.reshape(len(images), 64)[:, order].reshape(images.shape)
    return images, data.target[:n]


def user_backbone():
    import keras

    return keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(),
                             keras.layers.Dense(32, activation="relu"), keras.layers.Dense(32, activation="relu")])


def test_user_backbone_and_plain_dataset_learn_per_task():
    """The README's loop with a user's keras.Sequential and plain tf.data datasets of (images,
    labels) batches, uint8 and float, of known and unknown length: a partial last batch is dropped
    (one step shape, one trace), the steps are counted exactly, each fit is a task (EWC
    consolidates after each), and the model learns."""
    import keras
    import tensorflow as tf

    model = gcl_tf.EWC(backbone=user_backbone(), num_classes=10, num_tasks=2, ewc_lambda=1.0, fisher_samples=20)
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    traces = []
    original = model.learn

    def counting_learn(x, y):
        traces.append(x.shape)
        return original(x, y)

    model.learn = counting_learn
    accuracies = []
    for task, scale in ((0, None), (1, 255.0)):
        images, labels = digits(task)
        x = images if scale is None else images.astype(np.float32) / scale
        train = tf.data.Dataset.from_tensor_slices((x, labels)).batch(16)  # 300 = 18 x 16 + 12
        if task == 1:  # a stream of unknown length: Keras runs each epoch until the input ends
            train = train.filter(lambda images, labels: True)
        model.fit(train, epochs=2, verbose=0)
        assert int(model.current_task.numpy()) == task
        accuracies.append(model.evaluate(train, verbose=0, return_dict=True)["accuracy"])
    assert traces == [(16, 8, 8, 1)] * 2  # fixed shapes: traced once per image dtype (uint8, then float)
    assert int(model.step_counter.numpy()) == 2 * 2 * 18
    assert all(float(tf.reduce_sum(f)) > 0 for f in model.ewc.importance)  # consolidated after task 1
    assert min(accuracies) > 0.35, accuracies  # chance: 0.1


def test_the_api_builds_the_model_the_cli_builds(make_config):
    """GCL(**keywords) with the config's values is the model methods.build makes from the config:
    the same weights and memory after the same batches."""
    import keras
    import tensorflow as tf

    from gcl_tf.backbones import mlp

    config = make_config({"seed": 5, "method": {"name": "gcl", "memory_size": 30, "graph_lambda": 3.0,
                                                "context_temperature": 0.5, "test_graph_samples": 4},
                          "train": {"optimizer": "adam", "learning_rate": 0.003}})
    images, labels = digits(0, 60)
    batches = [(tf.constant(images[i:i + 10]), tf.constant(labels[i:i + 10], tf.int32)) for i in range(0, 60, 10)]
    states = []
    for build in ("cli", "api"):
        keras.utils.set_random_seed(0)
        if build == "cli":
            model = methods.build(config, (8, 8, 1), 10)
        else:
            model = gcl_tf.GCL(mlp((8, 8, 1), 32), num_classes=10, memory_size=30, hidden_size=32, graph_lambda=3.0,
                               context_temperature=0.5, test_graph_samples=4, seed=5, batch_size=10,
                               eval_batch_size=128)
        model.compile(optimizer=keras.optimizers.Adam(0.003))
        for batch in batches:
            model.train_step(batch)
        states.append([v.numpy() for v in model.trainable_variables] + [model.memory.edge_logits.numpy()])
    for a, b in zip(*states):
        np.testing.assert_array_equal(a, b)


def test_a_methods_keys_are_its_config_given_as_keywords_or_as_settings():
    """Every method takes the keys of its Config (declared there once) as keywords or as one
    ``settings=Config(...)``; a model built without keys holds the Config's defaults, and the CLI
    (methods.build) builds it with the config's method section; memory_size is declared once; the
    model's name is the registry key; the public gcl_tf.<Name> is the registry's class."""
    from gcl_tf.schema import MemoryMethodConfig

    for name in methods.names():
        cls = methods.method_class(name)
        extra = {"num_tasks": 2} if "num_tasks" in inspect.signature(cls).parameters else {}
        assert ("memory_size" in cls.Config.__dataclass_fields__) == issubclass(cls.Config, MemoryMethodConfig)
        assert "memory_size" not in cls.Config.__annotations__, name  # declared once, in MemoryMethodConfig
        assert getattr(gcl_tf, cls.__name__) is cls and cls.__name__ in gcl_tf.__all__
        model = cls(num_classes=10, input_shape=(8, 8, 1), **extra)
        assert model.name == name and methods.registry_name(cls) == name
        assert model.settings == cls.Config(name=name)  # its Config's defaults (its parent's for CBRS), its name
    config = gcl_tf.config.resolve({"method": {"name": "gcl", "graph_lambda": 7.0, "memory_size": 30}})
    model = methods.build(config, (8, 8, 1), 10)
    assert model.settings == config.method and model.settings.graph_lambda == 7.0 and model.capacity == 30
    from gcl_tf.methods.gcl.model import GCL

    given = GCL(num_classes=10, input_shape=(8, 8, 1), settings=GCL.Config(graph_lambda=7.0, memory_size=30))
    assert given.settings == model.settings and given.get_config()["graph_lambda"] == 7.0


def test_a_wrong_key_is_refused_when_the_model_is_built():
    """An unknown keyword is Python's TypeError; a value out of range a ConfigError naming the
    class; ``settings`` of another class, or with keys besides, a TypeError. A subclass keeps its
    parent's Config and registry key."""
    from gcl_tf.methods.er import ER
    from gcl_tf.methods.mir import MIR

    class Subclass(ER):  # keeps ER's constructor, Config and registry key
        pass

    model = Subclass(num_classes=10, input_shape=(8, 8, 1), memory_size=5)
    assert model.name == "er" and model.settings.memory_size == 5 and Subclass.Config is ER.Config
    with pytest.raises(ConfigError, match=r"^Subclass.memory_size: 0 is out of range"):
        Subclass(num_classes=10, input_shape=(8, 8, 1), memory_size=0)
    with pytest.raises(ConfigError, match=r"^ER.memory_size: 0 is out of range"):
        ER(num_classes=10, input_shape=(8, 8, 1), settings=ER.Config(memory_size=0))
    with pytest.raises(TypeError, match=r"^ER.__init__\(\) got an unexpected keyword argument 'memory'$"):
        ER(num_classes=10, input_shape=(8, 8, 1), memory=5)
    with pytest.raises(TypeError, match=r"settings must be a MIRConfig"):
        MIR(num_classes=10, input_shape=(8, 8, 1), settings=ER.Config())
    with pytest.raises(TypeError, match=r"settings must be a ERConfig, given alone"):
        ER(num_classes=10, input_shape=(8, 8, 1), settings=ER.Config(), memory_size=5)


@pytest.mark.parametrize("name", methods.names())
def test_fit_gives_a_method_with_per_task_state_the_classes_of_its_stream(name, monkeypatch):
    """A method with per-task class state (multi-head masks, iCaRL's exemplar sets) must not be
    task-free: the boundary fit adds reads each task's classes from its stream for it, and the
    method sets that state from them; a method without such state is told no classes (its stream
    is not read for them). A wrong ``task_free`` fails either way."""
    import tensorflow as tf

    from gcl_tf.callbacks import TaskBoundary

    cls = methods.method_class(name)
    told = []
    original = cls.on_task_begin
    monkeypatch.setattr(cls, "on_task_begin", lambda self, index, classes: (told.append(classes),
                                                                            original(self, index, classes)))
    parameters = inspect.signature(cls).parameters
    extra = {key: value for key, value in {"num_tasks": 2, "multi_head": True}.items() if key in parameters}
    model = cls(num_classes=10, input_shape=(8, 8, 1), **cls.test_settings, **extra)
    images, labels = digits(0, 200)
    keep = (labels == 2) | (labels == 3)
    stream = tf.data.Dataset.from_tensor_slices((images[keep], labels[keep])).batch(10)
    boundary = TaskBoundary(0, stream)
    boundary.set_model(model)
    boundary.on_train_begin()
    per_task = (model.exemplars.current_classes if name == "icarl" else
                model.task_classes.masks[0] if "multi_head" in extra else None)
    if per_task is None:
        # a task-free method is told no classes; one that needs the boundaries for another reason
        # (OnPro's first task) is told the stream's, and keeps no per-task class state
        assert told == [None] if cls.task_free else [list(c) for c in told] == [[2, 3]]
        return
    np.testing.assert_array_equal(told[0], [2, 3])
    np.testing.assert_array_equal(per_task.numpy(), np.isin(np.arange(10), [2, 3]))


def test_keywords_are_checked_and_the_input_shape_is_needed():
    import keras

    with pytest.raises(ConfigError, match=r"^ER.memory_size: 0 is out of range; allowed: \[1, inf\)$"):
        gcl_tf.ER(num_classes=10, input_shape=(8, 8, 1), memory_size=0)
    with pytest.raises(ConfigError, match="^GCL.context_batch: needs GCL.edge_memory: embeddings"):
        gcl_tf.GCL(num_classes=10, input_shape=(8, 8, 1), context_batch=10)
    undeclared = keras.Sequential([keras.layers.Flatten(), keras.layers.Dense(8, activation="relu")])
    with pytest.raises(ConfigError, match=r"^input_shape: er needs the shape of an image"):
        gcl_tf.ER(undeclared, num_classes=10)
    model = gcl_tf.ER(undeclared, num_classes=10, input_shape=(8, 8, 1))
    assert model.image_shape == (8, 8, 1) and model.memory.images.shape == (1000, 8, 8, 1)


def test_task_boundary_callback_names_the_task():
    """TaskBoundary(task) gives a task-aware method the task's index and classes (multi-head
    masks); without classes they are read from the stream."""
    import keras
    import tensorflow as tf

    model = gcl_tf.GEM(num_classes=10, num_tasks=3, memory_size=30, multi_head=True, input_shape=(8, 8, 1))
    model.compile(optimizer=keras.optimizers.SGD(0.05))
    images, labels = digits(0, 200)
    keep = labels < 2
    stream = tf.data.Dataset.from_tensor_slices((images[keep], labels[keep])).batch(10)
    model.fit(stream, callbacks=[gcl_tf.callbacks.TaskBoundary(2, stream)], verbose=0)
    assert int(model.current_task.numpy()) == 2
    np.testing.assert_array_equal(model.task_classes.masks.numpy()[2], np.arange(10) < 2)


def test_benchmarks_give_the_cli_streams(make_config):
    """gcl_tf.benchmarks.split yields the tasks of the CLI's benchmark for the same keys: the same
    classes and training batches, test data as (images, labels)."""
    from gcl_tf.data import ContinualBenchmark
    from gcl_tf.data.streams import train_dataset

    stream = gcl_tf.benchmarks.split(gcl_tf.data.load("digits"), num_tasks=2, classes_per_task=3,
                                     samples_per_task=40, batch_size=8, seed=4)
    config = make_config({"seed": 4, "benchmark": {"name": "split", "num_tasks": 2, "classes_per_task": 3,
                                                   "samples_per_task": 40}})
    reference = ContinualBenchmark(config.benchmark, 4)
    assert len(stream) == 2 and stream.input_shape == (8, 8, 1) and stream.num_classes == 10
    for task, ref in zip(stream, reference.tasks):
        np.testing.assert_array_equal(task.classes, ref.classes)
        expected, _ = train_dataset(ref.train_data, 8, 1, 4, ref.index)
        for (x, y), (ex, ey) in zip(task.train, expected):
            np.testing.assert_array_equal(x.numpy(), ex.numpy())
            np.testing.assert_array_equal(y.numpy(), ey.numpy())
        test_labels = np.concatenate([y.numpy() for _, y in task.test])
        np.testing.assert_array_equal(test_labels, ref.test_data.labels)
    with pytest.raises(ConfigError, match="benchmarks.split.num_tasks"):
        gcl_tf.benchmarks.split("digits", num_tasks=0)


def test_benchmarks_hold_out_the_cli_validation_split(make_config):
    """validation_fraction carves each task's validation batches out of its training samples, as
    the CLI's benchmark.validation_fraction does; without it, task.validation says how to get one."""
    from gcl_tf.data import ContinualBenchmark

    stream = gcl_tf.benchmarks.permuted("digits", num_tasks=2, samples_per_task=None, validation_fraction=0.2,
                                        seed=3)
    config = make_config({"seed": 3, "benchmark": {"name": "permuted", "num_tasks": 2, "samples_per_task": None,
                                                   "validation_fraction": 0.2}})
    reference = ContinualBenchmark(config.benchmark, 3, load_test=False)
    for task, ref in zip(stream, reference.tasks):
        images = np.concatenate([x.numpy() for x, _ in task.validation])
        np.testing.assert_array_equal(images, ref.validation_data.images)
        train = sum(int(y.shape[0]) for _, y in task.train)
        assert train == len(ref.train_data) // 10 * 10  # whole batches of 10
        assert abs(len(images) / (len(ref.train_data) + len(images)) - 0.2) < 0.01
    with pytest.raises(ValueError, match="validation_fraction > 0"):
        gcl_tf.benchmarks.split("digits", num_tasks=1).tasks[0].validation


def test_run_returns_the_results_it_writes(make_config, tmp_path):
    config = make_config({"benchmark": {"num_tasks": 2, "samples_per_task": 50}})
    results = gcl_tf.run(config, output_dir=str(tmp_path / "run"), method={"name": "er", "memory_size": 20},
                         **{"train.epochs": 2})
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["config"]["method"] == {"name": "er", "memory_size": 20, "replay_batch_size": None,
                                         "test_batchnorm": "moving"}
    assert saved["config"]["train"]["epochs"] == 2
    np.testing.assert_array_equal(results.accuracy_matrix, np.array(saved["accuracy_matrix"]))
    assert results.acc == saved["acc"] and results["train_steps"] == 2 * 2 * 5
    assert "ACC" in str(results)


def test_import_gcl_tf_is_light():
    """``import gcl_tf`` imports neither TensorFlow nor Keras nor a method; the names load on first use."""
    code = ("import sys, gcl_tf; "
            "loaded = [m for m in ('tensorflow', 'keras', 'gcl_tf.methods.gcl.model') if m in sys.modules]; "
            "assert not loaded, loaded; "
            "assert gcl_tf.GCL.__name__ == 'GCL' and 'tensorflow' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})


def test_every_class_a_saved_learner_names_is_known_to_keras_before_its_module_is_imported():
    """gcl_tf.import_hooks.CLASSES (what ``import gcl_tf`` registers with Keras, imported on first
    use) is every class gcl_tf registers: the methods and the backbones' layers."""
    import keras

    from gcl_tf import backbones, import_hooks

    for name in methods.names():
        methods.module(name)
    registry = keras.saving.get_custom_objects()
    ours = {key.split(">", 1)[1]: value for key, value in registry.items() if key.startswith("gcl_tf>")}
    assert set(ours) == set(import_hooks.CLASSES)
    for name, module in import_hooks.CLASSES.items():  # the classes themselves now, in their modules
        assert isinstance(ours[name], type) and ours[name].__module__.startswith(module), (name, ours[name])
    assert ours["FusedBatchNormalization"] is backbones.FusedBatchNormalization


@pytest.mark.slow  # a second process
def test_the_python_api_is_as_quiet_as_the_cli():
    """``import gcl_tf``, then the README's first steps (data, a method, fit): no TensorFlow
    start-up line on stderr (the CLI's filter, gcl_tf/quiet.py) though TF_CPP_MIN_LOG_LEVEL is
    not set; TF_CPP_MIN_LOG_LEVEL=0 keeps every line."""
    from helpers import TF_STARTUP_LOG, without_tf_log_level

    code = ("import gcl_tf, keras\n"
            "stream = gcl_tf.benchmarks.permuted(gcl_tf.data.load('digits'), num_tasks=1, samples_per_task=40)\n"
            "model = gcl_tf.GCL(num_classes=stream.num_classes, input_shape=stream.input_shape, memory_size=20, "
            "hidden_size=16)\n"
            "model.compile(optimizer=keras.optimizers.Adam(1e-3))\n"
            "model.fit(stream.tasks[0].train, verbose=0)\n"
            "print('fitted')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=without_tf_log_level(),
                          timeout=300)
    assert proc.returncode == 0 and "fitted" in proc.stdout, proc.stderr[-3000:]
    assert not TF_STARTUP_LOG.search(proc.stderr), proc.stderr[-3000:]
    shown = subprocess.run([sys.executable, "-c", "import gcl_tf, tensorflow"], capture_output=True, text=True,
                           env={**without_tf_log_level(), "TF_CPP_MIN_LOG_LEVEL": "0"}, timeout=300)
    assert shown.returncode == 0 and TF_STARTUP_LOG.search(shown.stderr), shown.stderr[-3000:]
