"""Train a method on a continual stream: ``python -m gcl_tf.train --config FILE [--set k=v ...]``.

Tasks are learned in order with ``model.fit`` (one online epoch by default); at the end of each
task every task is evaluated (a Keras callback), filling the accuracy matrix ``R[i][j]``.
Writes ``DIR/results.json`` (never overwritten without ``--overwrite``), ``DIR/config.yaml``
and TensorBoard logs under ``DIR/tensorboard``.
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import datetime
import sys
import time

import numpy as np

from gcl_tf import config as config_lib
from gcl_tf.errors import UserError, exit_on_user_error
from gcl_tf.io import write_atomic, write_json_atomic, write_npz_atomic
from gcl_tf.quiet import import_tensorflow

RESULTS = "results.json"
ARTIFACTS = "artifacts.npz"  # arrays for the figures (gcl_tf.benchmark): model.export_artifacts


def prepare_output(output_dir: str, overwrite: bool) -> None:
    results = os.path.join(output_dir, RESULTS)
    if os.path.exists(results) and not overwrite:
        raise UserError(f"{results} exists; pass --overwrite to replace it or choose another --output")
    os.makedirs(output_dir, exist_ok=True)


def build_model(config, benchmark):
    from gcl_tf import methods

    cls = methods.method_class(config.method.name)
    return cls(config, benchmark.input_shape, benchmark.num_classes)


def run(config, output_dir=None, overwrite: bool = False, verbose=None, benchmark=None) -> dict:
    """Train and evaluate one configuration; returns (and writes) the results dictionary."""
    import keras
    import tensorflow as tf

    from gcl_tf import metrics
    from gcl_tf.callbacks import StepLogger, TaskBoundary, TaskEndEvaluation
    from gcl_tf.data import ContinualBenchmark
    from gcl_tf.data.streams import train_dataset

    output_dir = output_dir or config.output_dir
    prepare_output(output_dir, overwrite)
    write_atomic(os.path.join(output_dir, "config.yaml"), config_lib.config_to_yaml(config))
    verbose = config.train.verbose if verbose is None else verbose

    keras.utils.set_random_seed(config.seed)
    if benchmark is None:
        benchmark = ContinualBenchmark(config.benchmark, config.seed, load_test=config.eval.split == "test")
    model = build_model(config, benchmark)
    model.compile_for_training(config.train)

    writer = tf.summary.create_file_writer(os.path.join(output_dir, "tensorboard"))
    evaluator = TaskEndEvaluation(benchmark, config.eval.split, config.eval.batch_size, writer, verbose=verbose > 0)
    step_logger = StepLogger(writer, config.train.log_every)
    task_seconds = []
    T = benchmark.num_tasks
    for task in benchmark.tasks:
        i = task.index
        if verbose:
            print(f"Task {i + 1}/{T} ({task.description}): {len(task.train)} training samples", flush=True)
        dataset, steps = train_dataset(task.train, config.train.batch_size, config.train.epochs, config.seed, i)
        model.on_task_start(i, task.classes)
        evaluator.task_index = i
        eval_before = evaluator.eval_seconds
        start = time.perf_counter()
        model.fit(
            dataset,
            epochs=config.train.epochs,
            steps_per_epoch=steps,
            callbacks=[TaskBoundary(i, dataset), evaluator, step_logger],
            verbose=verbose,
            shuffle=False,
        )
        task_seconds.append(time.perf_counter() - start - (evaluator.eval_seconds - eval_before))
    writer.flush()
    artifacts = model.export_artifacts(benchmark, config.eval.split)
    if artifacts:
        write_npz_atomic(os.path.join(output_dir, ARTIFACTS), artifacts)

    R = evaluator.matrix
    summary = metrics.summarize(R)
    results = {
        "method": config.method.name,
        "benchmark": f"{config.benchmark.name}-{config.benchmark.dataset}",
        "seed": config.seed,
        "eval_split": config.eval.split,
        "accuracy_matrix": R.tolist(),
        **summary,
        "train_seconds": float(sum(task_seconds)),
        "eval_seconds": float(evaluator.eval_seconds),
        "task_train_seconds": task_seconds,
        "train_steps": int(model.step_counter.numpy()),
        # Stream samples trained on and (unpadded) samples evaluated: the per-sample times.
        "train_samples": int(model.step_counter.numpy()) * config.train.batch_size,
        "eval_samples": int(evaluator.eval_samples),
        "num_parameters": int(sum(np.prod(v.shape) for v in model.trainable_variables)),
        "tensorflow_version": tf.__version__,
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": config.to_dict(),
    }
    write_json_atomic(os.path.join(output_dir, RESULTS), results)
    if verbose:
        print(f"ACC {summary['acc']:.2f}  FGT {summary['fgt']:.2f}  BWT {summary['bwt']:.2f}  "
              f"(train {results['train_seconds']:.1f}s, eval {results['eval_seconds']:.1f}s) -> "
              f"{os.path.join(output_dir, RESULTS)}", flush=True)
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gcl_tf.train", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="YAML config file (see configs/)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set train.learning_rate=0.01 (repeatable)")
    parser.add_argument("--output", help="output folder (default: the config's output_dir)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing results.json")
    return parser


@exit_on_user_error
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import_tensorflow()  # first, so a config error is the only line on stderr
    config = config_lib.load_config(args.config, args.overrides)
    run(config, output_dir=args.output, overwrite=args.overwrite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
