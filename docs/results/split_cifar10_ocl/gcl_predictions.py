"""Issue 49: what a finished GCL learner's test accuracy is under each way of reading its test graph.

Each saved GCL learner (a run's ``learner.keras``, a local artifact of ``benchmark paper``) is
evaluated on CIFAR-10's test split, every class allowed, per task and over all of them:

- ``head``: as the run evaluated it (the paper: the output head on the memory's values aggregated
  along ``test_graph_samples`` sampled test graphs); its ACC is the run's results.json ``acc``;
- ``head, expected graph``: the same head on the Bernoulli means sigmoid(E), no sampling
  (``stochastic_graphs: false`` at test time only);
- ``vote``: ``method.test_prediction: vote``, the memory's labels weighted by the expected graph;
- ``head, memory BatchNorm``: ``head`` after every BatchNorm layer of the trunk takes the
  statistics of one pass over the learner's own memory (no weight changed, no test image used;
  bn_statistics.py's check, for GCL, whose trunk runs over contexts and targets in one batch).

    python docs/results/split_cifar10_ocl/gcl_predictions.py --data data/cifar10.npz \
        --runs RUNS/gcl/seed1 RUNS/gcl/seed2 --output docs/results/split_cifar10_ocl/gcl_predictions.json

A diagnosis on the test split of learners already trained; a choice between the predictions is
made on validation (docs/reproducing.md), not from this table.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

READOUTS = ("head", "head, expected graph", "vote", "head, memory BatchNorm")


def accuracies(model, x, y, classes_per_task: int, batch: int) -> dict:
    """Test accuracy (%) over all images and per task (classes ``t * classes_per_task`` on) of the
    model's predictions as set now, in batches of ``batch`` (the run's eval.batch_size: the test
    graphs' noise is drawn per batch shape, so that ``head`` is the run's own evaluation)."""
    import tensorflow as tf

    mask = tf.ones([model.num_classes], tf.bool)
    log_probs = tf.function(lambda images: model.predict_log_probs(images, mask))
    with model.evaluation_scope():  # the memory's embeddings once, as the run's evaluation does
        predicted = np.concatenate([np.argmax(log_probs(tf.constant(x[i:i + batch])).numpy(), -1)
                                    for i in range(0, len(x), batch)])
    task = y // classes_per_task
    return {"acc": float(100 * np.mean(predicted == y)),
            "tasks": [float(100 * np.mean(predicted[task == t] == y[task == t])) for t in range(int(task.max()) + 1)]}


def with_memory_statistics(model) -> int:
    """Every BatchNorm layer of the trunk: its moving statistics := those of the whole memory."""
    import keras
    import tensorflow as tf

    layers = [layer for layer in model.trunk._flatten_layers() if isinstance(layer, keras.layers.BatchNormalization)]
    for layer in layers:
        layer.momentum = 0.0  # the moving statistics become this one batch's
    images = model.memory.images[: int(model.memory.num_filled.numpy())]
    model.trunk(tf.convert_to_tensor(images), training=True)
    return len(layers)


def readouts(model, x, y, classes_per_task: int, batch: int) -> dict:
    """{readout: accuracies} for each of READOUTS (the last one changes the model's statistics)."""
    rows = {"head": accuracies(model, x, y, classes_per_task, batch)}
    with model.evaluation_variant({"stochastic_graphs": False}):
        rows["head, expected graph"] = accuracies(model, x, y, classes_per_task, batch)
    with model.evaluation_variant({"test_prediction": "vote"}):
        rows["vote"] = accuracies(model, x, y, classes_per_task, batch)
    with_memory_statistics(model)
    rows["head, memory BatchNorm"] = accuracies(model, x, y, classes_per_task, batch)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="CIFAR-10 .npz (python -m gcl_tf.data to-npz)")
    parser.add_argument("--runs", nargs="+", required=True, help="GCL run folders holding learner.keras")
    parser.add_argument("--output", help="JSON file for the table")
    args = parser.parse_args(argv)
    import gcl_tf

    data = np.load(args.data)
    x, y = data["x_test"].astype("float32") / 255.0, data["y_test"].reshape(-1)
    rows = {}
    for run in args.runs:
        saved = json.load(open(os.path.join(run, "results.json")))
        model = gcl_tf.load_model(os.path.join(run, "learner.keras"), compile=False)
        classes_per_task, batch = (int(saved["config"][a][b]) for a, b in (("benchmark", "classes_per_task"),
                                                                           ("eval", "batch_size")))
        rows[run] = {"acc_results_json": saved["acc"], **readouts(model, x, y, classes_per_task, batch)}
        for name in READOUTS:
            cells = " ".join(f"{a:5.1f}" for a in rows[run][name]["tasks"])
            print(f"{run}  {name:24s} {rows[run][name]['acc']:6.2f}  tasks {cells}", flush=True)
    if args.output:
        with open(args.output, "w") as handle:
            json.dump({"command": " ".join(["python", *sys.argv]), "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
