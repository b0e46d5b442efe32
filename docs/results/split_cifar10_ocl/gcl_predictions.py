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
made on validation (docs/reproducing/todays_protocol_diagnosis.md), not from this table.
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bn_statistics import arguments, learners, read_test_split, write_rows  # noqa: E402

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


def readouts(model, x, y, classes_per_task: int, batch: int) -> dict:
    """{readout: accuracies} for each of READOUTS."""
    rows = {"head": accuracies(model, x, y, classes_per_task, batch)}
    with model.evaluation_variant({"stochastic_graphs": False}):
        rows["head, expected graph"] = accuracies(model, x, y, classes_per_task, batch)
    with model.evaluation_variant({"test_prediction": "vote"}):
        rows["vote"] = accuracies(model, x, y, classes_per_task, batch)
    with model.evaluation_variant({"test_batchnorm": "memory"}):  # method.test_batchnorm (gcl_tf/batchnorm.py)
        rows["head, memory BatchNorm"] = accuracies(model, x, y, classes_per_task, batch)
    return rows


def main(argv=None) -> int:
    args = arguments(__doc__.splitlines()[0], argv, runs_help="GCL run folders holding learner.keras")
    x, y = read_test_split(args.data)
    rows = {}
    for run, saved, model in learners(args.runs):
        classes_per_task, batch = (int(saved["config"][a][b]) for a, b in (("benchmark", "classes_per_task"),
                                                                           ("eval", "batch_size")))
        rows[run] = {"acc_results_json": saved["acc"], **readouts(model, x, y, classes_per_task, batch)}
        for name in READOUTS:
            cells = " ".join(f"{a:5.1f}" for a in rows[run][name]["tasks"])
            print(f"{run}  {name:24s} {rows[run][name]['acc']:6.2f}  tasks {cells}", flush=True)
    write_rows(args.output, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
