"""Issue 49: how much of a run's test ACC its BatchNorm moving statistics cost.

Each saved learner (a run's ``learner.keras``, a local artifact of ``benchmark paper``) is evaluated
on CIFAR-10's test split twice: as saved, and after its BatchNorm layers' statistics are set to
those of one pass over its own episodic memory (500 images of every task seen; no weight changes,
no test image used to set them). A method whose step runs the network over separate batches (DER++:
the stream's 10 images, then two replay batches of 64) trains its layers on per-pass statistics that
its moving averages do not match at test time; one run over the concatenation (ER) does not.

    python docs/results/split_cifar10_ocl/bn_statistics.py --data data/cifar10.npz \
        --runs RUNS/er/seed0 RUNS/er_ace/seed0 RUNS/derpp/seed0 RUNS/mir/seed0 \
        --output docs/results/split_cifar10_ocl/bn_statistics.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from gcl_tf.batchnorm import batchnorm_layers


def accuracy(model, x, y, batch: int = 500) -> float:
    predictions = [np.argmax(model.predict(x[i:i + batch], verbose=0), -1) for i in range(0, len(x), batch)]
    return float(100 * np.mean(np.concatenate(predictions) == y))


def arguments(description: str, argv, runs_help: str = "run folders holding learner.keras"):
    """The scripts' command line: --data (the test split's .npz), --runs, --output."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", required=True, help="CIFAR-10 .npz (python -m gcl_tf.data to-npz)")
    parser.add_argument("--runs", nargs="+", required=True, help=runs_help)
    parser.add_argument("--output", help="JSON file for the table")
    return parser.parse_args(argv)


def read_test_split(path: str):
    """The .npz's test images in [0, 1] and labels   ([N, ...] float32, [N])."""
    data = np.load(path)
    return data["x_test"].astype("float32") / 255.0, data["y_test"].reshape(-1)


def learners(runs):
    """``(run, its results.json, its learner)`` for each run folder, one learner at a time."""
    import gcl_tf

    for run in runs:
        saved = json.load(open(os.path.join(run, "results.json")))
        yield run, saved, gcl_tf.load_model(os.path.join(run, "learner.keras"), compile=False)


def write_rows(path, rows: dict) -> None:
    """The table as JSON with the command that made it (nothing without ``path``)."""
    if path:
        with open(path, "w") as handle:
            json.dump({"command": " ".join(["python", *sys.argv]), "rows": rows}, handle, indent=1)


def main(argv=None) -> int:
    args = arguments(__doc__.splitlines()[0], argv)
    x, y = read_test_split(args.data)
    rows = {}
    for run, saved, model in learners(args.runs):
        as_saved = accuracy(model, x, y)
        with model.evaluation_variant({"test_batchnorm": "memory"}):  # gcl_tf/batchnorm.py, for each evaluation
            with_memory = accuracy(model, x, y)
        rows[run] = {"method": saved["method"], "acc_results_json": saved["acc"], "acc_as_saved": as_saved,
                     "acc_memory_statistics": with_memory, "batchnorm_layers": len(batchnorm_layers(model))}
        print(f"{saved['method']:8s} ACC as saved {as_saved:6.2f}  with the memory's BatchNorm statistics "
              f"{rows[run]['acc_memory_statistics']:6.2f}", flush=True)
    write_rows(args.output, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
