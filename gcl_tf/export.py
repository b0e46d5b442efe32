"""Export a trained run as a SavedModel: ``python -m gcl_tf.export RUN_DIR OUT``.

The model is rebuilt from ``RUN_DIR/config.yaml`` and ``RUN_DIR/model.json`` and restored from the
run's last checkpoint (``RUN_DIR/checkpoints``), with its memory frozen as it was at the end of
training. ``OUT`` is a SavedModel whose ``serving_default`` signature maps

    images: float32 [N, H, W, C] in [0, 1] (the run's input shape), seed: int64 scalar
    -> probabilities: float32 [N, K]

over all K classes. GCL's prediction averages ``method.test_graph_samples`` graphs sampled from
the image to the memory, drawn from ``seed`` (the same seed and batch give the same
probabilities; the draws are made for the whole batch, so an image's result also depends on the
batch it is in); the other methods ignore the seed. ``OUT/metadata.json`` records the input
shape, the class names (when the data source knows them), the method and the run.
``python -m gcl_tf.predict OUT IMAGE...`` classifies image files with it.
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import inspect
import shutil
import sys
import tempfile

from gcl_tf.errors import UserError, exit_on_user_error
from gcl_tf.faults import check_writable
from gcl_tf.io import read_json, write_json_atomic
from gcl_tf.quiet import import_tensorflow
from gcl_tf.run_layout import CONFIG, MODEL_INFO, RESULTS, checkpoint_dir, checkpoint_steps

METADATA = "metadata.json"
SIGNATURE = "serving_default"


def serving_seed(seed):
    """The stateless seed ([2] int32) that the serving signature derives from its int ``seed``:
    what to pass as ``predict_log_probs(..., seed=...)`` to reproduce an exported prediction."""
    import tensorflow as tf

    from gcl_tf import salts
    from gcl_tf.memory import step_seed

    return step_seed(0, tf.cast(seed, tf.int64), salts.SERVING)


def takes_seed(model) -> bool:
    return "seed" in inspect.signature(model.predict_log_probs).parameters


def class_probabilities(model, images, seed):
    """``[N, K]`` probabilities over all classes: what the serving signature computes."""
    import tensorflow as tf

    mask = tf.ones([model.num_classes], tf.bool)
    if takes_seed(model):
        log_probs = model.predict_log_probs(images, mask, seed=serving_seed(seed))
    else:
        log_probs = model.predict_log_probs(images, mask)
    return tf.exp(log_probs)


def serving_module(model):
    """A ``tf.Module`` holding ``model`` (its variables, memory included) and the serving function."""
    import tensorflow as tf

    module = tf.Module(name="serving")
    module.model = model
    spec = [tf.TensorSpec([None, *model.image_shape], tf.float32, name="images"),
            tf.TensorSpec([], tf.int64, name="seed")]

    @tf.function(input_signature=spec)
    def serve(images, seed):
        return {"probabilities": class_probabilities(model, images, seed)}

    module.serve = serve
    return module


# What an export writes in OUT: the SavedModel (tf.saved_model.save) and its metadata; metadata.json
# and saved_model.pb mark it (what --overwrite may replace: gcl_tf/overwrite.py).
EXPORT_NAMES = ("saved_model.pb", "fingerprint.pb", "variables", "assets", METADATA)
EXPORT_MARKERS = ("saved_model.pb", METADATA)
EXPORTED = "a SavedModel folder written by gcl_tf.export"


def check_out(out: str, overwrite: bool, run_dir: str | None = None) -> None:
    """OUT can take the export: not RUN_DIR, not inside it nor above it; a new folder, or with
    ``overwrite`` an earlier export (nothing else: a file, a folder holding other files)."""
    from gcl_tf import overwrite as overwrite_lib

    if run_dir is not None:
        overwrite_lib.check_apart(out, {"RUN_DIR": run_dir}, "OUT")
    if os.path.lexists(out) and not os.path.isdir(out):
        raise UserError(f"OUT: {out} is a file; allowed: a new folder, or with --overwrite {EXPORTED}")
    overwrite_lib.check_replaceable(out, "OUT", EXPORTED, EXPORT_NAMES, EXPORT_MARKERS)  # else: not ours
    if os.path.exists(out) and not overwrite:
        raise UserError(f"OUT: {os.path.abspath(out)} exists; pass --overwrite to replace it or choose another folder")
    check_writable(out, "OUT")  # under a file, a disk that takes no folder: before anything is built


def check_run_dir(run_dir: str, allow_unfinished: bool = True) -> None:
    """RUN_DIR is a run's folder: its config, its model description and a checkpoint, and, unless
    ``allow_unfinished``, its results.json (a run is finished once it exists); checked before
    TensorFlow loads."""
    from gcl_tf import config as config_lib

    if not os.path.isdir(run_dir):
        raise UserError(f"RUN_DIR: folder {run_dir!r} does not exist")
    for path in (os.path.join(run_dir, CONFIG), os.path.join(run_dir, MODEL_INFO)):
        if not os.path.isfile(path):
            raise UserError(f"RUN_DIR: {path} is missing; is {run_dir!r} a folder written by gcl_tf.train?")
    steps = checkpoint_steps(run_dir)
    if not steps:
        raise UserError(f"RUN_DIR: no checkpoint in {checkpoint_dir(run_dir)}; train the run first")
    if not allow_unfinished and not os.path.isfile(os.path.join(run_dir, RESULTS)):
        raise UserError(f"RUN_DIR: the run is not finished (no {RESULTS}; its last checkpoint is of step {steps[-1]}); "
                        f"finish it with python -m gcl_tf.train --config {os.path.join(run_dir, CONFIG)} --resume, "
                        "or pass --allow-unfinished")
    config_lib.load_config(os.path.join(run_dir, CONFIG))


def load_run(run_dir: str, allow_unfinished: bool = False):
    """The model of a run restored from its last checkpoint, and the run's description."""
    from gcl_tf import config as config_lib
    from gcl_tf import methods
    from gcl_tf.checkpoint import RunCheckpoints, latest_checkpoint

    check_run_dir(run_dir, allow_unfinished)
    config_path, info_path = os.path.join(run_dir, CONFIG), os.path.join(run_dir, MODEL_INFO)
    config = config_lib.load_saved_config(config_path)
    try:
        info = read_json(info_path)
        input_shape, num_classes = tuple(int(d) for d in info["input_shape"]), int(info["num_classes"])
    except (ValueError, KeyError, TypeError):
        raise UserError(f"RUN_DIR: {info_path} is not a valid model description") from None
    latest = latest_checkpoint(run_dir)
    if latest is None:
        raise UserError(f"RUN_DIR: no checkpoint in {checkpoint_dir(run_dir)}; train the run first")
    model = methods.build(config, input_shape, num_classes)
    model.compile_for_training(config.train)
    # The tasks the run trains (benchmark.tasks, when it names some), as train.py sized its progress.
    tasks = config.benchmark.num_tasks if config.benchmark.tasks is None else len(config.benchmark.tasks)
    checkpoints = RunCheckpoints(model, tasks, run_dir)
    checkpoints.restore(latest, key="RUN_DIR", advice="is it damaged, or was RUN_DIR/config.yaml changed?")
    tasks_done = int(checkpoints.progress.task.numpy())
    if tasks_done < tasks and not allow_unfinished:
        raise UserError(
            f"RUN_DIR: the run is not finished ({tasks_done} of {tasks} tasks trained); "
            "finish it with python -m gcl_tf.train ... --resume, or pass --allow-unfinished"
        )
    run = {
        "run_dir": os.path.abspath(run_dir),
        "checkpoint": os.path.basename(latest),
        "train_steps": int(model.step_counter.numpy()),
        "tasks_trained": tasks_done,
        "num_tasks": int(tasks),
        "seed": int(config.seed),
        "config": config.to_dict(),
    }
    return model, info, run


def export(run_dir: str, out: str, overwrite: bool = False, allow_unfinished: bool = False) -> dict:
    """Write the SavedModel and its metadata to ``out`` (built in a temporary folder next to it,
    then renamed: an interrupted export leaves no half-written ``out``). Returns the metadata."""
    import tensorflow as tf

    from gcl_tf.optimizers import averages_in_place, averaging_optimizer

    out = os.path.abspath(out)
    check_out(out, overwrite, run_dir)
    model, info, run = load_run(run_dir, allow_unfinished)
    module = serving_module(model)
    metadata = {
        "method": info["method"],
        "input_shape": list(model.image_shape),
        "num_classes": int(model.num_classes),
        "class_names": info.get("class_names"),
        "uses_seed": takes_seed(model),
        "signature": {
            "name": SIGNATURE,
            "inputs": {"images": "float32 [N, H, W, C] in [0, 1]", "seed": "int64 scalar"},
            "outputs": {"probabilities": "float32 [N, K]"},
        },
        **run,
    }
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix="." + os.path.basename(out) + ".", suffix=".tmp", dir=parent)
    try:
        # serve what the run evaluated: the weights' averages, the statistics it normalised by
        with averages_in_place(averaging_optimizer(model.optimizer)), model.test_statistics():
            tf.saved_model.save(module, staging, signatures={SIGNATURE: module.serve})
        write_json_atomic(os.path.join(staging, METADATA), metadata)
        if os.path.exists(out):
            old = staging + ".old"
            os.replace(out, old)
            os.replace(staging, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return metadata


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gcl_tf.export", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder written by gcl_tf.train")
    parser.add_argument("out", metavar="OUT", help="the SavedModel folder to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier export in OUT (nothing else)")
    parser.add_argument("--allow-unfinished", action="store_true",
                        help="export the last checkpoint of a run that has not trained every task")
    return parser


@exit_on_user_error
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    check_out(args.out, args.overwrite, args.run_dir)  # both before TensorFlow loads
    check_run_dir(args.run_dir, args.allow_unfinished)
    import_tensorflow()
    metadata = export(args.run_dir, args.out, overwrite=args.overwrite, allow_unfinished=args.allow_unfinished)
    shape = "x".join(str(d) for d in metadata["input_shape"])
    print(f"exported {metadata['method']} ({metadata['tasks_trained']}/{metadata['num_tasks']} tasks, "
          f"step {metadata['train_steps']}, input {shape}, {metadata['num_classes']} classes) -> {args.out}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
