"""Step times of today's protocol (issue 49): each method's training step on CIFAR-10-shaped
batches (batch 10, memory full), with the protocol's augmentation (``augment: ocl``) and without
it, the same replay batch either way; medians of repeats taken in turns over every row and
setting in one process, so the ratios (ocl / none, and each row against ER's) hold on a shared
machine.

    python docs/results/split_cifar10_ocl/step_times.py --repeats 30 \
        --output docs/results/split_cifar10_ocl/step_times.json
"""
from __future__ import annotations

import argparse
import json
import os
import shlex

SHAPE = (32, 32, 3)
# (row, method, trunk, filters, method keys): the study's presets (configs/split_cifar10_ocl.yaml)
ROWS = [
    ("er", "er", "resnet18", 20, {"memory_size": 500, "replay_batch_size": 64}),
    ("er_ace", "er_ace", "resnet18", 20, {"memory_size": 500, "replay_batch_size": 64}),
    ("derpp", "derpp", "resnet18", 20, {"memory_size": 500, "replay_batch_size": 64}),
    ("mir", "mir", "resnet18", 20, {"memory_size": 500, "replay_batch_size": 64}),
    ("er (paper protocol: replay 10)", "er", "resnet18", 20, {"memory_size": 500, "replay_batch_size": 10}),
    ("er, 64 filters", "er", "resnet18", 64, {"memory_size": 500, "replay_batch_size": 64}),
    ("gcl", "gcl", "convnet", 64, {"memory_size": 500}),
    # GCL's today's preset (docs/gcl_today.md) as the config gives it, and with 64 contexts (before rule 5)
    ("gcl, today's preset", "gcl", "resnet18", 20, "preset"),
    ("gcl, 64 contexts", "gcl", "resnet18", 20, {"memory_size": 500, "edge_memory": "embeddings",
                                                 "context_batch": 64, "own_latent": True, "target_loss": "present",
                                                 "regularize_below": 1.0, "kernel_width": "median"}),
    ("gcl, resnet18, whole memory", "gcl", "resnet18", 20, {"memory_size": 500}),
    # the preset with its regulariser held to the weights' moving average (rule 18; train.ema_momentum below)
    ("gcl, today's preset, held to the average", "gcl", "resnet18", 20, "preset"),
    # and the average's predictions distilled too (rule 19)
    ("gcl, today's preset, held to the average, distilled", "gcl", "resnet18", 20, "preset"),
    ("onpro", "onpro", "resnet18", 20, {"memory_size": 500, "replay_batch_size": 64}),
    ("onpro (first task)", "onpro", "resnet18", 20, {"memory_size": 500, "replay_batch_size": 64}),
    ("onpro, rotations 4", "onpro", "resnet18", 20, {"memory_size": 500, "replay_batch_size": 64, "rotations": 4}),
]
# The task a row's timed steps run in (default 0): OnPro's step after the first task (4 tasks of 5)
# mixes, rotates and contrasts the replay batch too; its first task's step does not.
TASK = {"onpro": 1, "onpro, rotations 4": 1}
# Rows whose method keys need more of the run's config: (its train section's keys, more method keys)
MORE = {"gcl, today's preset, held to the average": ({"ema_momentum": 0.99}, {"graph_target": "average"}),
        "gcl, today's preset, held to the average, distilled": (
            {"ema_momentum": 0.99}, {"graph_target": "average", "distill_lambda": 5.5, "distill_temperature": 4.0})}
CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "configs", "split_cifar10_ocl.yaml")


def preset_keys(method: str) -> dict:
    """A method's keys in configs/split_cifar10_ocl.yaml's preset (its model's trunk is the row's)."""
    import yaml

    with open(CONFIG) as f:
        return dict(yaml.safe_load(f)["presets"][method]["method"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rows", nargs="*", default=None, help="row names (default: all)")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)

    from gcl_tf.benchmark.timing import interleaved_seconds
    from gcl_tf.benchmark.workloads import make_model, prepare_train_step
    from gcl_tf.speed import settings

    steps, row_keys = {}, {}
    for row, method, trunk, filters, keys in ROWS:
        if args.rows and row not in args.rows:
            continue
        train, more = MORE.get(row, ({}, {}))
        keys = {**(preset_keys(method) if keys == "preset" else keys), **more}
        row_keys[row] = {**keys, **{f"train.{k}": v for k, v in train.items()}}
        sections = settings(method)  # the speed checks' (gcl_tf.speed), the row's train keys over them
        sections = {**sections, "train": {**sections.get("train", {}), **train}}
        for augment in ("none", "ocl"):
            model = make_model(method, SHAPE, backbone=trunk, filters=filters, augment=augment, settings=sections,
                               **keys)
            if method != "gcl":
                model.optimizer.learning_rate = 0.001
            steps[row, augment], _ = prepare_train_step(model, SHAPE)  # the memory filled in task 0
            model.current_task.assign(TASK.get(row, 0))
    # Every row and setting in turns in one loop: the ratios between rows hold too.
    seconds = interleaved_seconds(steps, args.repeats)
    er = seconds.get(("er", "ocl"))
    out = {}
    for row in dict.fromkeys(r for r, _ in steps):
        none, ocl = seconds[row, "none"], seconds[row, "ocl"]
        out[row] = {"none_ms": 1000 * none, "ocl_ms": 1000 * ocl, "ratio": ocl / none,
                    "vs_er_ocl": None if er is None else ocl / er, "method_keys": row_keys[row]}
        print(f"{row:34s} none {1000 * none:9.1f} ms  ocl {1000 * ocl:9.1f} ms  ocl / none {ocl / none:.3f}"
              + ("" if er is None else f"  ocl / ER's ocl {ocl / er:6.2f}"), flush=True)
    if args.output:
        with open(args.output, "w") as handle:
            rows = "" if args.rows is None else " --rows " + " ".join(shlex.quote(r) for r in args.rows)
            command = f"python docs/results/split_cifar10_ocl/step_times.py --repeats {args.repeats}{rows}"
            json.dump({"command": command, "cpu_count": os.cpu_count(), "rows": out},
                      handle, indent=1)


if __name__ == "__main__":
    main()
