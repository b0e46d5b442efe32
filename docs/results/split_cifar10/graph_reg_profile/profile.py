"""What the graph regulariser does during a GCL run, read from the runs' TensorBoard logs: per task,
the mean over the logged steps (every ``train.log_every`` steps) of

- ``regularized_fraction``: the fraction of the step's contexts the best-loss mask regularises (m_i: the
  model got worse on context i since its best loss);
- ``graph_loss``: L_G, the BCE between the current context edges and the stored ones;
- ``lambda_graph``: graph_lambda x L_G, the term the optimiser sees, beside
- ``target_loss`` and ``context_loss`` (the cross-entropies it is added to).

    python docs/results/split_cifar10/graph_reg_profile/profile.py RUN_DIR [RUN_DIR ...] [--output FILE.json]

Each RUN_DIR is a run folder with ``config.yaml`` and ``tensorboard/`` (the paper suite's
``runs/split_cifar10/<variant>/seed<s>``). TensorBoard logs are not kept in git: the numbers
this printed for the graph_lambda study are (``profile.json`` beside this file, with the
``results.json`` of its two 2-task runs, ``lambda0/`` and ``lambda50/``; docs/reproducing/split_cifar10.md
has the commands).
"""
from __future__ import annotations

import argparse
import glob
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TERMS = ("regularized_fraction", "graph_loss", "target_loss", "context_loss")


def read_scalars(run_dir: str) -> dict[str, dict[int, float]]:
    """{term: {step: value}} of the run's ``train/<term>`` scalars (a resumed run's later file wins)."""
    import tensorflow as tf

    scalars: dict[str, dict[int, float]] = {term: {} for term in TERMS}
    for path in sorted(glob.glob(os.path.join(run_dir, "tensorboard", "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                term = value.tag.removeprefix("train/")
                if term in scalars:
                    scalars[term][int(event.step)] = float(tf.make_ndarray(value.tensor))
    return scalars


def profile(run_dir: str, per_task: int) -> dict:
    """The run's graph_lambda and, per task of ``per_task`` steps, the mean of each term."""
    import yaml

    with open(os.path.join(run_dir, "config.yaml")) as f:
        config = yaml.safe_load(f)
    graph_lambda = float(config["method"].get("graph_lambda", 0.0))
    scalars = read_scalars(run_dir)
    steps = sorted(scalars["graph_loss"])
    if not steps:
        raise SystemExit(f"error: {run_dir} has no train/graph_loss in tensorboard/ (a GCL run's logs are needed)")
    tasks = []
    for t in range(config["benchmark"]["num_tasks"]):
        window = [s for s in steps if t * per_task < s <= (t + 1) * per_task]
        if not window:
            continue
        row = {"task": t + 1, "logged_steps": len(window)}
        for term in TERMS:
            values = [scalars[term][s] for s in window if s in scalars[term]]
            row[term] = sum(values) / len(values)
        row["lambda_graph"] = graph_lambda * row["graph_loss"]
        tasks.append(row)
    return {"run": run_dir, "graph_lambda": graph_lambda, "steps_per_task": per_task, "tasks": tasks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--steps-per-task", type=int, default=1000,
                        help="training steps of a task (default 1000: Split CIFAR10's 10,000 images, batch 10)")
    parser.add_argument("--output", help="also write the profiles here as JSON")
    args = parser.parse_args()
    profiles = [profile(run, args.steps_per_task) for run in args.runs]
    for p in profiles:
        print(f"{p['run']}  (graph_lambda {p['graph_lambda']:g})")
        print("  task  regularized  graph_loss  lambda*L_G  target_loss  context_loss")
        for row in p["tasks"]:
            print(f"  {row['task']:>4}  {row['regularized_fraction']:>11.3f}  {row['graph_loss']:>10.4f}  "
                  f"{row['lambda_graph']:>10.3f}  {row['target_loss']:>11.3f}  {row['context_loss']:>12.3f}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(profiles, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
