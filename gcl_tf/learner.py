"""A finished run's learner, and new runs that start from it (``init_from``).

Every run writes ``DIR/learner.keras`` when it finishes: the method saved whole by Keras
(gcl_tf/saving.py: weights, optimizer state, episodic memory, counters), which
``gcl_tf.load_model`` loads in any process. A run whose config sets ``init_from: DIR`` (the CLI's
``--init-from DIR``) builds its method from its own config, then loads that learner into it and
learns its own tasks after the learner's: its task ``i`` is the learner's task ``k + i`` (``k``:
the tasks the learner had begun), its accuracy matrix covers its own tasks only, and its
``results.json`` says where it started. What the learner is cannot change on the way; a config
that differs from the learner's run in any of these keys is refused with one line naming it:

- the ``method`` and ``model`` sections (the method, its memory size, the backbone);
- the classes and the image shape of the data (``DIR/model.json``);
- ``train.optimizer`` and ``train.mixed_precision`` (the optimizer state and the layers' dtypes);
- what the method's constructor takes from ``benchmark`` (task-aware methods: ``num_tasks``,
  which sizes their per-task memories, ``multi_head``, ``classes_per_task``).

Everything else may change: the data (dataset, source, protocol, tasks), the seed (it keys the
data's order and, from then on, the learner's random draws), the batch sizes, the learning rate
(the new one replaces the learner's), the number of epochs.
"""
from __future__ import annotations

import contextlib
import os

from gcl_tf import config_dicts
from gcl_tf.errors import UserError
from gcl_tf.faults import disk_error
from gcl_tf.run_layout import CONFIG, LEARNER, MODEL_INFO

# The benchmark keys a method's constructor may take (methods.run_arguments): part of the learner.
_BENCHMARK_ARGUMENTS = ("num_tasks", "multi_head", "classes_per_task")


def learner_path(run_dir: str) -> str:
    return os.path.join(run_dir, LEARNER)


def write_learner(model, output_dir: str) -> str:
    """``model.save(DIR/learner.keras)``, atomically (a temporary file, fsync, rename); a failed
    write is a one-line DiskError and leaves no partial file."""
    path = learner_path(output_dir)
    tmp = os.path.join(output_dir, f".learner.{os.getpid()}.keras")
    try:
        model.save(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise disk_error(path, error) from None
    return path


def learner_keys(config, info: dict) -> dict:
    """``{key: value}``: what the learner a run of ``config`` builds is (see the module
    docstring); ``info``: the run's data description (``num_classes``, ``input_shape``)."""
    from gcl_tf import methods

    data = config.to_dict()
    run = methods.run_arguments(config, info["input_shape"], info["num_classes"])
    return {**config_dicts.flat_keys({"method": data["method"], "model": data["model"]}),
            "train.optimizer": config.train.optimizer, "train.mixed_precision": config.train.mixed_precision,
            "train.ema_momentum": config.train.ema_momentum,  # the averages are optimizer state
            "the data's classes": int(info["num_classes"]),
            "the data's image shape": [int(d) for d in info["input_shape"]],
            **{f"benchmark.{name}": run[name] for name in _BENCHMARK_ARGUMENTS if name in run}}


def check_init_folder(run_dir: str, output_dir: str) -> str:
    """The learner of ``init_from``'s folder (a finished run's, not this run's ``output_dir``),
    checked without loading anything; a one-line UserError otherwise."""
    path = learner_path(run_dir)
    if not os.path.isdir(run_dir):
        raise UserError(f"init_from: {run_dir} is not a folder; allowed: the folder of a finished run")
    if os.path.abspath(run_dir) == os.path.abspath(output_dir):
        raise UserError(f"init_from: {run_dir} is this run's own output folder; allowed: another run's folder "
                        "(give this run another --output)")
    if not os.path.isfile(path):
        raise UserError(f"init_from: {run_dir} holds no {LEARNER} (a run writes it when it finishes); allowed: "
                        "the folder of a finished run")
    return path


def check_init_from(config, benchmark, output_dir: str) -> dict:
    """Check ``config.init_from`` before anything is written: a finished run's folder, not this
    run's, whose learner is the one ``config`` builds. Returns ``{"run", "learner"}``; a one-line
    UserError otherwise."""
    from gcl_tf import config as config_lib
    from gcl_tf.io import read_json

    run_dir = config.init_from
    path = check_init_folder(run_dir, output_dir)
    try:
        saved = config_lib.load_saved_config(os.path.join(run_dir, CONFIG))
        info = read_json(os.path.join(run_dir, MODEL_INFO))
    except (UserError, OSError, ValueError) as error:
        raise UserError(f"init_from: cannot read the run's config.yaml and model.json in {run_dir} ({error})") from None
    new_info = {"num_classes": benchmark.num_classes, "input_shape": benchmark.input_shape}
    shown = config_dicts.describe_differences(learner_keys(saved, info), learner_keys(config, new_info))
    if shown:
        raise UserError(f"init_from: the config changes what the learner of {run_dir} is: {shown}; allowed: "
                        "the learner's method, model, optimizer, classes and image shape (the data, seed, "
                        "batch sizes, learning rate and epochs may change)")
    return {"run": os.path.abspath(run_dir), "learner": os.path.abspath(path)}


def start_from_learner(model, learner: str, learning_rate: float, num_tasks: int) -> int:
    """Load the saved ``learner`` into ``model`` (built and compiled from the run's config), set
    the run's ``learning_rate``, and return the tasks the learner had begun (this run's task offset).
    A one-line UserError when it does not load or when the method has no room for this run's
    ``num_tasks`` more tasks."""
    try:
        model.load_weights(learner)
    except Exception as error:  # noqa: BLE001 - a damaged or foreign file fails in many ways
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"init_from: cannot load {learner} into the {model.name} built from the config "
                        f"({reason}); allowed: a learner.keras written by gcl_tf for the same method") from None
    model.optimizer.learning_rate = learning_rate
    offset = int(model.next_task.numpy())
    capacity = model.get_config().get("num_tasks")  # task-aware methods: tasks their state has room for
    if capacity is not None and offset + num_tasks > capacity:
        raise UserError(f"init_from: the {model.name} learner has room for {capacity} tasks "
                        f"(benchmark.num_tasks of its run) and has begun {offset}; this run's {num_tasks} more do not "
                        f"fit; allowed: at most {max(capacity - offset, 0)} tasks (benchmark.tasks)")
    return offset
