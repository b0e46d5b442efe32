"""Whether a searched value should become a preset: ``python -m gcl_tf.tune.adopt``.

A search's best trial is one seed on the data it was searched on, the highest of many noisy
draws; a value at the edge of stability can win it and then fall apart on a user's data (issue
52: ER's Permuted MNIST learning rate 0.223, its search's best, ended a held-out 28x28 stream at
43-54 ACC where the paper's 0.1 gave 75-79). The rule here asks two things of a searched value
(the config's preset, with ``--searched`` overrides if the preset no longer holds them) against
the paper's (the preset with ``--paper`` overrides), each run over several seeds on validation
splits (the test split is never read):

1. **Stable on its own stream**: its mean ACC minus its std over seeds is higher than the
   paper's value's (a value whose seeds scatter pays for it);
2. **Holds off the data**: on a second dataset with the same config (``--second`` overrides,
   e.g. Fashion-MNIST for an MNIST config), its mean is no worse than the paper's mean less the
   paper's std over seeds.

Both hold: adopt the searched value; else keep the paper's. The worst accuracy on a task just
learned (min over tasks and seeds of ``R[t][t]``) is reported beside, the symptom of a learning
rate too high. Writes ``DIR/adopt.json`` (every run's ACC, the verdict and its reasons) and
``DIR/adopt.md``; each run is ``DIR/<own|second>-<searched|paper>-seed<k>`` (resumable: a
finished run is read, an interrupted one resumed).
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import dataclasses
import sys

from gcl_tf.errors import UserError, exit_on_user_error

ADOPT_FILE = "adopt.json"
ARMS = ("searched", "paper")
STREAMS = ("own", "second")


# ----------------------------------------------------------------------------- the rule (pure)
def mean_std(values) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1) as the suite's tables give them; 0 for one value."""
    from gcl_tf.benchmark.layout import mean_std as table_mean_std

    mean, std, n = table_mean_std(values)
    return mean, (std if n > 1 else 0.0)


@dataclasses.dataclass(frozen=True)
class Verdict:
    adopt: bool
    stable: bool  # rule 1
    holds: bool  # rule 2
    reasons: tuple[str, ...]


def decide(own: dict, second: dict) -> Verdict:
    """The rule, on ACC per seed: ``own`` and ``second`` map ``searched`` and ``paper`` to lists."""
    s_mean, s_std = mean_std(own["searched"])
    p_mean, p_std = mean_std(own["paper"])
    stable = s_mean - s_std > p_mean - p_std
    reasons = [f"own stream: searched {s_mean:.2f} - {s_std:.2f} = {s_mean - s_std:.2f} "
               f"{'>' if stable else '<='} paper {p_mean:.2f} - {p_std:.2f} = {p_mean - p_std:.2f}"]
    s2_mean, _ = mean_std(second["searched"])
    p2_mean, p2_std = mean_std(second["paper"])
    holds = s2_mean >= p2_mean - p2_std
    reasons.append(f"second dataset: searched {s2_mean:.2f} {'>=' if holds else '<'} "
                   f"paper {p2_mean:.2f} - {p2_std:.2f} = {p2_mean - p2_std:.2f}")
    return Verdict(stable and holds, stable, holds, tuple(reasons))


def worst_new_task(matrix) -> float:
    """The lowest accuracy on a task just learned, ``min_t R[t][t]``."""
    return float(min(row[t] for t, row in enumerate(matrix) if t < len(row)))


# ----------------------------------------------------------------------------- the runs
def run_overrides(args, stream: str, arm: str, seed: int) -> list[str]:
    overrides = [f"method.name={args.method}", "eval.split=validation", f"seed={seed}"]
    overrides += [f"benchmark.validation_fraction={args.validation_fraction}", *args.overrides]
    if stream == "second":
        overrides += args.second
    overrides += args.paper if arm == "paper" else args.searched
    return overrides


def run_folder(output: str, stream: str, arm: str, seed: int) -> str:
    return os.path.join(output, f"{stream}-{arm}-seed{seed}")


def plan(args) -> list[tuple[str, str, int, list[str]]]:
    """Every run of the check, in order (own stream first), with its overrides."""
    return [(stream, arm, seed, run_overrides(args, stream, arm, seed))
            for stream in STREAMS for arm in ARMS for seed in range(args.seeds)]


def precheck(args) -> None:
    """Before TensorFlow: each run's config (keys, ranges, data paths) and the output folder."""
    from gcl_tf import config as config_lib
    from gcl_tf.prechecks import output_folder

    if args.seeds < 2:
        raise UserError(f"--seeds: {args.seeds} is too few; allowed: 2 or more (the rule needs a spread)")
    if not args.paper:
        raise UserError("--paper: none given; allowed: one or more KEY=VALUE, the paper's values the "
                        "searched preset replaced (e.g. --paper train.learning_rate=0.1)")
    if not args.second:
        raise UserError("--second: none given; allowed: one or more KEY=VALUE that put the same config on "
                        "a second dataset (e.g. --second benchmark.source=idx --second benchmark.path=DIR)")
    for stream, arm, seed, overrides in plan(args):
        config_lib.precheck(args.config, overrides)
    output_folder(args.output)


def train_one(config_path: str, overrides: list[str], folder: str, verbose: int) -> dict:
    """One run's results: read when it finished before with this config, else trained (resumed
    from its last checkpoint when it stopped unfinished, as a search's trial is)."""
    from gcl_tf import config as config_lib
    from gcl_tf import train
    from gcl_tf.run_layout import RESULTS
    from gcl_tf.tune.search import can_resume, finished_run

    config = config_lib.load_config(config_path, overrides)
    done = finished_run(folder, config)
    if done is not None:
        return done
    if os.path.exists(os.path.join(folder, RESULTS)):
        raise UserError(f"--output: {folder} holds a finished run of another config (the config's preset changed "
                        f"since?); allowed: the values it ran with as --searched or --paper, or another --output")
    resume = can_resume(folder, config)
    return train.run(config, output_dir=folder, resume=resume, overwrite=not resume, verbose=verbose)


def check(args) -> dict:
    from gcl_tf.io import write_atomic, write_json_atomic

    acc = {stream: {arm: [] for arm in ARMS} for stream in STREAMS}
    worst = {stream: {arm: [] for arm in ARMS} for stream in STREAMS}
    runs = plan(args)
    for index, (stream, arm, seed, overrides) in enumerate(runs, 1):
        folder = run_folder(args.output, stream, arm, seed)
        results = train_one(args.config, overrides, folder, args.verbose)
        acc[stream][arm].append(float(results["acc"]))
        worst[stream][arm].append(worst_new_task(results["accuracy_matrix"]))
        print(f"[{index}/{len(runs)}] {stream} {arm} seed {seed}: validation ACC {results['acc']:.2f}", flush=True)
    verdict = decide(acc["own"], acc["second"])
    report = {"config": args.config, "method": args.method, "overrides": args.overrides, "paper": args.paper,
              "searched": args.searched,
              "second": args.second, "seeds": args.seeds, "acc": acc, "worst_new_task": worst,
              "adopt": verdict.adopt, "stable": verdict.stable, "holds": verdict.holds,
              "reasons": list(verdict.reasons), "command": command_line(args)}
    write_json_atomic(os.path.join(args.output, ADOPT_FILE), report)
    write_atomic(os.path.join(args.output, "adopt.md"), markdown(report))
    return report


def markdown(report: dict) -> str:
    lines = [f"# {report['config']}, {report['method']}: searched preset against the paper's values", "",
             f"`{report['command']}`", "",
             "| stream | values | ACC (validation, mean ± std) | per seed | worst new-task accuracy |",
             "| --- | --- | --- | --- | --- |"]
    for stream in STREAMS:
        for arm in ARMS:
            values = report["acc"][stream][arm]
            mean, std = mean_std(values)
            seeds = ", ".join(f"{v:.2f}" for v in values)
            lines.append(f"| {stream} | {arm} | {mean:.2f} ± {std:.2f} | {seeds} | "
                         f"{min(report['worst_new_task'][stream][arm]):.1f} |")
    lines += ["", *[f"- {reason}" for reason in report["reasons"]], "",
              f"**{'adopt the searched value' if report['adopt'] else 'keep the paper value'}**", ""]
    return "\n".join(lines)


def command_line(args) -> str:
    parts = ["python -m gcl_tf.tune.adopt", "--config", args.config, "--method", args.method]
    for flag, values in (("--searched", args.searched), ("--paper", args.paper), ("--second", args.second),
                         ("--set", args.overrides)):
        for value in values:
            parts += [flag, value]
    parts += ["--seeds", str(args.seeds), "--output", args.output]
    return " ".join(parts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gcl_tf.tune.adopt",
        description="Whether a config's searched preset should stay: against the paper's values, over "
                    "seeds, on validation of its own stream and of a second dataset (docs/tuning/adopting.md).")
    parser.add_argument("--config", required=True, help="YAML config whose preset holds the searched values")
    parser.add_argument("--method", required=True, help="the preset's method")
    parser.add_argument("--paper", action="append", default=[], metavar="KEY=VALUE",
                        help="the paper's value of a searched key (repeatable)")
    parser.add_argument("--searched", action="append", default=[], metavar="KEY=VALUE",
                        help="the searched value of a key, when the config's preset no longer holds it (repeatable)")
    parser.add_argument("--second", action="append", default=[], metavar="KEY=VALUE",
                        help="what puts the config on the second dataset (repeatable)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="for every run, e.g. the config's own data path (repeatable)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per value and dataset (default 3)")
    parser.add_argument("--validation-fraction", type=float, default=0.1,
                        help="of each task's training data (default 0.1, the searches')")
    parser.add_argument("--output", required=True, help="folder of the check's runs and its report")
    parser.add_argument("--verbose", type=int, choices=[0, 1, 2], default=0, help="progress inside each run")
    return parser


@exit_on_user_error
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    precheck(args)
    from gcl_tf.quiet import import_tensorflow

    import_tensorflow()
    report = check(args)
    print("\n".join(report["reasons"]))
    print("adopt the searched value" if report["adopt"] else "keep the paper value")
    return 0


if __name__ == "__main__":
    sys.exit(main())
