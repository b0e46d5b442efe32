"""Check that every config's presets learn: ``python -m gcl_tf.benchmark presets``.

Each config's preset (its method, model and training settings, as ``method.name=<m>`` selects
them) is run on a short stream of real data of the config's kind, with the config's own protocol
(permuted, rotated or split; a split is cut to the data's classes), evaluated on validation splits
carved from the training data (the test split is never read). A preset *learns* when its
*new-task accuracy*, the accuracy on each task just learned (R[i][i]) averaged over the tasks
after the first, is far above chance: at least chance + 1/4 of the way to 100% (the failure this
guards against: 10% on every task after the first, with chance at 10%). The check is about
learning each new task, not about keeping the old ones: that is ACC, reported next to it (a
learner that forgets every earlier task of a split stream learns, with an ACC near chance).
MNIST-like configs (an MLP preset) run on ``--mnist-like`` data, RGB ones (a convolutional
preset) on ``--rgb`` data:

    python -m gcl_tf.benchmark presets --mnist-like idx:/usr/share/datasets/fashion-mnist \\
        --rgb npz:data/cifar10.npz --methods gcl,er --output results/presets

A task with fewer training samples than ``--samples-per-task`` (a class pair of the digits has
about 270) is cut to what the data has: every task of that stream gets the fewest any has, and
the report says so. A config that cannot run on the data (one line naming the config) is
skipped, with its reason in the report, and the others are checked.

Writes ``DIR/presets.json`` and ``DIR/presets.md`` (ACC, new-task accuracy and the learning check
per config and method, what was cut or skipped); each run goes to ``DIR/runs/<config>/<method>/``,
which keeps only what the report is made of (its ``results.json``, ``config.yaml`` and
``check.json``, a few KB: the run's checkpoints, learner, TensorBoard events and artifacts, a few
MB a check, are removed when it ends), and is reused when finished with the same preset and
``--set``, so an interrupted check resumes. Exit status 1 when a preset does not learn or a config
was skipped for an error.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
from dataclasses import dataclass

import numpy as np

from gcl_tf.benchmark import roles
from gcl_tf.errors import UserError, exit_on_user_error
from gcl_tf.io import read_json, write_atomic, write_json_atomic

PROG = "python -m gcl_tf.benchmark presets"
RGB_BACKBONES = ("convnet", "resnet18")
KEPT = ("check.json", "config.yaml", "results.json")  # of a check's run: what the report is made of


@dataclass
class Data:
    """A data source given as ``SOURCE[:PATH]`` (e.g. ``digits``, ``idx:/usr/share/datasets/fashion-mnist``)."""

    source: str
    path: str | None = None

    @classmethod
    def parse(cls, text: str, option: str) -> "Data":
        source, _, path = text.partition(":")
        allowed = ("digits", "idx", "npz", "folder")
        if source not in allowed:
            raise UserError(f"{option}: unknown source {source!r}; allowed: digits, idx:PATH, npz:PATH, folder:PATH")
        if source != "digits" and not path:
            raise UserError(f"{option}: source {source} needs a path ({source}:PATH)")
        return cls(source, path or None)

    def overrides(self) -> list[str]:
        dataset = "digits" if self.source == "digits" else os.path.basename(os.path.normpath(self.path))
        return [f"benchmark.source={self.source}", f"benchmark.path={self.path or 'null'}",
                f"benchmark.dataset={dataset}", "benchmark.image_size=null", "benchmark.num_classes=null"]


def is_rgb(config) -> bool:
    """A config's kind, from its chosen model: a convolutional backbone reads RGB images."""
    return config.model.backbone in RGB_BACKBONES


def check_config(config_path: str, method: str, data: Data, num_tasks: int = 3, samples_per_task: int = 500,
                 validation_fraction: float = 0.2, seed: int = 0, data_classes: int = 10, overrides=()):
    """The config of ``config_path`` with ``method``'s preset, on ``data``: its protocol cut to
    ``num_tasks`` tasks of ``samples_per_task`` samples (None: all of a task's; a split to
    ``data_classes`` classes), evaluated on validation splits; then the user's ``overrides``
    (``--set``, over the preset: e.g. GCL's constructor defaults in place of the preset's)."""
    from gcl_tf import config as config_lib

    raw = config_lib.load_yaml(config_path)
    base = config_lib.resolve(raw, [f"method.name={method}"])
    tasks = num_tasks
    protocol = [f"method.name={method}", f"seed={seed}", *data.overrides(),
                f"benchmark.samples_per_task={'null' if samples_per_task is None else samples_per_task}",
                "benchmark.test_samples_per_task=null",
                f"benchmark.validation_fraction={validation_fraction}", "eval.split=validation",
                "train.verbose=0", "train.checkpoint_every=0"]
    if base.benchmark.name == "split":
        per_task = min(base.benchmark.classes_per_task, data_classes // num_tasks) or 1
        tasks = min(num_tasks, data_classes // per_task)
        protocol.append(f"benchmark.classes_per_task={per_task}")
    protocol.append(f"benchmark.num_tasks={tasks}")
    return config_lib.resolve(raw, [*protocol, *overrides])


def chance(config, num_classes: int) -> float:
    """Accuracy (percent) of a uniform guess among the classes a prediction may choose."""
    b = config.benchmark
    allowed = b.classes_per_task if b.multi_head else num_classes
    return 100.0 / allowed


def learns(matrix, chance_accuracy: float) -> tuple[bool, float]:
    """``(learns, score)``: score = mean accuracy on each task just learned after the first
    (the diagonal R[i][i], i >= 1); learns when score >= chance + (100 - chance) / 4."""
    R = np.asarray(matrix, dtype=float)
    score = float(np.mean(np.diag(R)[1:])) if len(R) > 1 else float(R[0, 0])
    return score >= chance_accuracy + (100.0 - chance_accuracy) / 4.0, score


def threshold(chance_accuracy: float) -> float:
    """The new-task accuracy a preset needs to learn: chance + a quarter of the way to 100%."""
    return chance_accuracy + (100.0 - chance_accuracy) / 4.0


def available_per_task(config, source) -> list[int]:
    """Training samples each task of ``config``'s stream can draw from in ``source`` (a split
    task: those of its classes; a permuted or rotated one: the whole training split)."""
    from gcl_tf.data.protocols import split_classes

    b = config.benchmark
    labels = source.load("train").labels
    if b.name != "split":
        return [len(labels)] * b.num_tasks
    groups = split_classes(source.num_classes, b.num_tasks, b.classes_per_task, b.class_order, config.seed)
    return [int(np.isin(labels, group).sum()) for group in groups]


def data_label(data: Data) -> str:
    return f"{data.source}:{data.path}" if data.path else data.source


def preset_of(config) -> dict:
    """What a check of ``config`` trained with: its method, model and train sections (as JSON)."""
    resolved = config.to_dict()
    return json.loads(json.dumps({section: resolved[section] for section in ("method", "model", "train")}))


def check(config_path: str, method: str, data: Data, output_dir: str, **stream) -> dict:
    """Run (or reuse) one preset check; its row of the report. A stream whose tasks have fewer
    training samples than ``samples_per_task`` is cut to the fewest a task has (the row's note)."""
    from gcl_tf import train
    from gcl_tf.data import ContinualBenchmark, make_source

    row_path = os.path.join(output_dir, "check.json")
    config = check_config(config_path, method, data, **stream)
    if os.path.isfile(row_path):
        row = read_json(row_path)
        # else checked with other --set, or the config's preset has changed since: again
        if row.get("overrides", []) == list(stream.get("overrides", ())) and row.get("preset") == preset_of(config):
            return row
    source = make_source(config.benchmark)
    note = ""
    wanted = config.benchmark.samples_per_task
    if wanted is not None:
        fewest = min(available_per_task(config, source))
        if wanted > fewest:
            config = check_config(config_path, method, data, **{**stream, "samples_per_task": fewest})
            note = (f"samples per task cut from {wanted} to {fewest}: the fewest a task of this stream has in "
                    f"{data_label(data)}")
    benchmark = ContinualBenchmark(config.benchmark, config.seed, load_test=False, source=source)
    results = train.run(config, output_dir=output_dir, overwrite=True, verbose=0, benchmark=benchmark)
    prune_run(output_dir)
    chance_accuracy = chance(config, benchmark.num_classes)
    ok, score = learns(results["accuracy_matrix"], chance_accuracy)
    row = {"config": os.path.splitext(os.path.basename(config_path))[0], "method": method, "data": data_label(data),
           "tasks": config.benchmark.num_tasks, "samples_per_task": config.benchmark.samples_per_task,
           "acc": float(results["acc"]), "new_task_accuracy": score, "chance": chance_accuracy,
           "threshold": threshold(chance_accuracy), "learns": ok, "note": note,
           "overrides": list(stream.get("overrides", ())), "preset": preset_of(config)}
    write_json_atomic(row_path, row)
    return row


def prune_run(output_dir: str) -> None:
    """Remove from a check's run folder all but :data:`KEPT` (checkpoints, learner, TensorBoard
    events, artifacts.npz: what a check does not report, a few MB a check)."""
    for name in os.listdir(output_dir):
        if name in KEPT:
            continue
        path = os.path.join(output_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(folder) for name in names)


def verdict(row: dict) -> str:
    """A check's line: its verdict named by what it measures (each new task learned, the
    new-task accuracy against the threshold), then ACC, which it does not judge."""
    ok, limit = row["learns"], row.get("threshold", threshold(row["chance"]))
    return (f"{row['config']:24s} {row['method']:8s} learns each new task: {'yes' if ok else 'NO '} "
            f"(new-task accuracy {row['new_task_accuracy']:5.1f} {'>=' if ok else '< '} threshold {limit:4.1f})  "
            f"ACC {row['acc']:5.1f} (every task at the end)" + (f"  ({row['note']})" if row.get("note") else ""))


LEGEND = """\
Each config's preset on a short stream of real data (its protocol; validation splits carved from
the training data, the test split never read).

- **ACC**: the final accuracy averaged over every task (%), forgetting included: the paper's measure.
- **new-task accuracy**: the accuracy on each task just after learning it (R[i][i]), averaged over
  tasks 2 on; **learns** compares it, and only it, with the threshold, chance + a quarter of the way
  to 100%. It says whether each new task is learned, not whether the earlier ones are kept: a
  learner that forgets every earlier task of a split stream learns, with an ACC near chance.
"""


def markdown(rows: list[dict], overrides=()) -> str:
    """The report: the legend (and the ``--set`` over every preset), a row per check, then what
    was skipped and why."""
    checked = [r for r in rows if not r.get("skipped")]
    lines = [LEGEND]
    if overrides:
        lines += ["Over every preset: " + " ".join(f"`--set {o}`" for o in overrides), ""]
    lines += [
             "| config | data | method | tasks x samples | ACC | new-task accuracy | chance | threshold "
             "| learns (new-task accuracy >= threshold) | note |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in checked:
        samples = r.get("samples_per_task")
        threshold_ = r.get("threshold", threshold(r["chance"]))
        lines.append(f"| {r['config']} | {r['data']} | {r['method']} | {r['tasks']} x {samples or 'all'} | "
                     f"{r['acc']:.1f} | {r['new_task_accuracy']:.1f} | {r['chance']:.0f} | {threshold_:.1f} | "
                     f"{'yes' if r['learns'] else 'NO'} | {r.get('note', '')} |")
    skipped = [r for r in rows if r.get("skipped")]
    if skipped:
        lines += ["", "Skipped:", ""]
        lines += [f"- {r['config']} {r['method']}" + (f" ({r['data']})" if r["data"] else "") + f": {r['skipped']}"
                  for r in skipped]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=sorted(glob.glob("configs/*.yaml")),
                        help="config files (default: configs/*.yaml)")
    checked = ",".join(roles.PRESETS_CHECK)
    parser.add_argument("--methods", default=checked, help=f"comma-separated methods with a preset (default {checked})")
    parser.add_argument("--mnist-like", default="digits", help="data for MLP presets: digits, idx:PATH, npz:PATH")
    parser.add_argument("--rgb", default=None, help="data for convolutional presets: npz:PATH or folder:PATH "
                                                    "(without it RGB configs are skipped)")
    parser.add_argument("--tasks", type=int, default=3, help="tasks per stream (default 3)")
    parser.add_argument("--samples-per-task", type=int, default=500, help="training samples per task (default 500)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key over every preset, e.g. --set method.kernel_width=median (repeatable)")
    parser.add_argument("--output", required=True, help="folder for the runs and the report")
    return parser


@exit_on_user_error
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from gcl_tf import config as config_lib
    from gcl_tf.quiet import import_tensorflow

    import_tensorflow()  # first, so that TensorFlow's start-up lines are dropped (gcl_tf/quiet.py)
    mnist_like = Data.parse(args.mnist_like, "--mnist-like")
    rgb = Data.parse(args.rgb, "--rgb") if args.rgb else None
    methods = [m for m in args.methods.split(",") if m]
    rows = []
    for path in args.configs:
        raw = config_lib.load_yaml(path)
        name = os.path.splitext(os.path.basename(path))[0]
        for method in methods:
            if method not in (raw.get("presets") or {}) and method != (raw.get("method") or {}).get("name"):
                continue
            data = None
            try:
                chosen = config_lib.resolve(raw, [f"method.name={method}", *args.overrides])
                data = rgb if is_rgb(chosen) else mnist_like
                if data is None:
                    print(f"{name} {method}: skipped (an RGB preset; give --rgb)", flush=True)
                    continue
                row = check(path, method, data, os.path.join(args.output, "runs", name, method),
                            num_tasks=args.tasks, samples_per_task=args.samples_per_task, seed=args.seed,
                            overrides=args.overrides)
            except UserError as error:  # this config cannot run on this data: the others still can
                reason = " ".join(str(error).split())
                rows.append({"config": name, "method": method, "data": data_label(data) if data else None,
                             "skipped": reason, "learns": None})
                print(f"{name} {method}: skipped ({path}: {reason})", flush=True)
                continue
            rows.append(row)
            print(verdict(row), flush=True)
    write_json_atomic(os.path.join(args.output, "presets.json"), rows)
    write_atomic(os.path.join(args.output, "presets.md"), markdown(rows, args.overrides))
    runs = os.path.join(args.output, "runs")
    print(f"report: {os.path.join(args.output, 'presets.md')} (learns each new task: new-task accuracy >= chance + "
          "a quarter of the way to 100%; ACC: every task at the end, forgetting included); "
          f"{runs} keeps each run's {', '.join(KEPT)} only ({folder_bytes(runs) / 1e3:.0f} KB)", flush=True)
    failed = [f"{r['config']}/{r['method']}" for r in rows if r["learns"] is False]
    skipped = [f"{r['config']}/{r['method']}" for r in rows if r.get("skipped")]
    if failed:
        print(f"presets that do not learn each new task: {', '.join(failed)}", flush=True)
    if skipped:
        print(f"presets skipped for an error: {', '.join(skipped)}", flush=True)
    return 1 if failed or skipped else 0


if __name__ == "__main__":
    sys.exit(main())
