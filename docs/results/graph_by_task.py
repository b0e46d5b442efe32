"""Where GCL's test-time graph puts its edges, by the task the memory's contexts came from.

    python docs/results/graph_by_task.py [--by-task] [--per-task N] RUN_DIR [RUN_DIR ...]

For a finished GCL run (its config.yaml and last checkpoint), every memory slot is traced back
to the task whose training stream it came from (its image is looked up among the tasks'
training images), and for test images of each task the expected target graph (Bernoulli means,
self-normalised over the filled slots) is split into the mass on contexts of the same task and
on contexts of the same class. Printed per run: the share of the memory that is the test
image's own task, the graph mass on it, the mass on contexts of the right class, and the
accuracy of the graph's label vote (the class with the most mass), as means over the tasks;
``--by-task`` adds a row for each task's test images (is the newest task's vote the one that lags?);
``--per-task`` how many of each task's test images (500; more than a task has: all of them).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

KEYS = ("own_task_share", "own_task_mass", "right_class_mass", "label_vote_accuracy")  # a row's four shares


def analyse(run_dir: str, per_task: int = 500) -> dict:
    import tensorflow as tf

    from gcl_tf import config as config_lib
    from gcl_tf.checkpoint import latest_checkpoint
    from gcl_tf.data import ContinualBenchmark
    from gcl_tf.data.streams import to_float
    from gcl_tf.methods.gcl.graph import (
        edge_logits,
        label_vote_logits,  # GCL's test_prediction: vote
    )
    from gcl_tf.train import build_training_state

    config = config_lib.load_config(os.path.join(run_dir, "config.yaml"))
    benchmark = ContinualBenchmark(config.benchmark, config.seed, load_test=True)
    with tempfile.TemporaryDirectory() as scratch:
        model, _ = build_training_state(config, benchmark, scratch, resume_from=[latest_checkpoint(run_dir)])
    filled = int(model.memory.num_filled.numpy())
    images = model.memory.images.numpy()[:filled]
    labels = model.memory.labels.numpy()[:filled]
    origin = {}
    for task in benchmark.tasks:
        for image in task.train_data.images:
            origin[image.tobytes()] = task.index
    as_uint8 = np.rint(images * 255.0).astype(np.uint8)  # the memory holds model inputs in [0, 1]
    task_of = np.array([origin.get(im.tobytes(), -1) for im in as_uint8])
    found = float(np.mean(task_of >= 0))
    u_c, _ = model.embed(tf.constant(images), training=False)
    rows = []
    for task in benchmark.tasks:
        x = task.test_data.images[:per_task]
        y = task.test_data.labels[:per_task]
        u_t, _ = model.embed(to_float(tf.constant(x)), training=False)
        graph = tf.sigmoid(edge_logits(u_t, u_c, model.kernel_log_scale)).numpy()  # [N, C]
        graph /= np.maximum(graph.sum(1, keepdims=True), 1e-12)
        same_task = graph[:, task_of == task.index].sum(1)
        same_class = (graph * (labels[None, :] == y[:, None])).sum(1)
        votes = label_vote_logits(graph, np.eye(benchmark.num_classes, dtype=graph.dtype)[labels]).numpy()
        rows.append((np.mean(task_of == task.index), same_task.mean(), same_class.mean(),
                     np.mean(votes.argmax(1) == y)))
    return {"run": run_dir, "memory": filled, "traced": found, **dict(zip(KEYS, np.array(rows).mean(0))),
            "tasks": [dict(zip(KEYS, row)) for row in rows]}


def _cells(r: dict) -> str:
    return " | ".join(f"{100 * r[k]:.1f}%" for k in KEYS)


def main(argv) -> int:
    from gcl_tf.quiet import import_tensorflow

    parser = argparse.ArgumentParser(description="GCL's test graph by the task of each memory slot")
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--by-task", action="store_true", help="a row for each task too")
    parser.add_argument("--per-task", type=int, default=500, help="test images of each task (default 500)")
    args = parser.parse_args(argv)
    import_tensorflow()
    print("| run | memory | own task's share of memory | graph mass on own task | graph mass on right class "
          "| label-vote accuracy |")
    print("|---|---|---|---|---|---|")
    for run_dir in args.runs:
        r = analyse(run_dir, args.per_task)
        print(f"| {os.path.relpath(r['run'])} | {r['memory']} | {_cells(r)} |", flush=True)
        for index, task in enumerate(r["tasks"] if args.by_task else []):
            print(f"| task {index + 1} | | {_cells(task)} |", flush=True)
        if r["traced"] < 1.0:
            print(f"  (only {100 * r['traced']:.0f}% of the slots were found among the training images)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
