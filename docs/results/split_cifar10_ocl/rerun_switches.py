"""Which of the published re-runs' settings today's presets take (issue 70 items 1 and 3), decided on
validation by the rule written before the runs (docs/reproducing/rerun_settings.md): 10% of each
task's training images held out (``benchmark.validation_fraction: 0.1``, ``eval.split: validation``),
the whole stream, memory 500, seed 0 unless a study says otherwise.

Studies (each a list of ``python -m gcl_tf.train`` runs, one folder a run under
``docs/results/split_cifar10_ocl/validation/reruns/``, skipped when its results.json exists and
resumed from its checkpoints when it has some, so the command goes on where it stopped):

- ``switches``: each re-run setting alone on the preset's 20-filter trunk, for ER, ER-ACE and DER++
  (:data:`SWITCHES`; the presets of ER-ACE and DER++ have run: ``../five_tasks/*-separate``);
- ``width``: each method with the settings ``switches`` adopted, on 20 filters (when it adopted more
  than one: their interaction) and on 64 (the re-runs' trunk); read from ``switches``' results, so
  it runs after them;
- ``order``: ER under ``benchmark.class_order: random`` on seeds 0, 1, 2, and under the fixed order
  on seeds 1 and 2 (seed 0: ``switches``' preset);
- ``onpro`` (not in ``all``: some 5 hours a run at 20 filters): CCL-DC's AdamW in place of its
  authors' Adam with L2 decay;
- ``memory_bn_seeds``: ER's ``memory_bn`` switch and its preset on seeds 1 and 2 (rule 7b: ER's
  ``memory_bn`` is decided by the mean over seeds 0-2).

    python docs/results/split_cifar10_ocl/rerun_switches.py all          # from the folder holding data/cifar10.npz
    python docs/results/split_cifar10_ocl/rerun_switches.py switches --only derpp-mkd_ocl,derpp-ccl_dc
    python docs/results/split_cifar10_ocl/rerun_switches.py table        # decisions.md from what has run
    python docs/results/split_cifar10_ocl/rerun_switches.py switches --list   # the commands only
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
OUT = os.path.join(HERE, "validation", "reruns")
BASE = ["--config", os.path.join(ROOT, "configs", "split_cifar10_ocl.yaml"),
        "--set", "benchmark.validation_fraction=0.1", "--set", "eval.split=validation",
        "--set", "benchmark.source=npz", "--set", "benchmark.path=data/cifar10.npz"]
MARGIN = 2.0  # validation ACC points a setting must win by (the rule: rerun_settings.md)
METHODS = ("er", "er_ace", "derpp")
#: runs already made with the preset on the same validation stream (issue 49's one_pass decision)
EARLIER = {"er_ace-preset": os.path.join(HERE, "validation", "five_tasks", "er_ace-separate"),
           "derpp-preset": os.path.join(HERE, "validation", "five_tasks", "derpp-separate")}

ADAMW = ["train.optimizer=adamw", "train.learning_rate=0.0005", "train.weight_decay=0.0001"]  # CCL-DC's configs
DERPP_WEIGHTS = ["method.alpha=0.2", "method.beta=1.0"]  # mkd_ocl's and CCL-DC's DER++
#: (method, switch) -> the --set values: each re-run's stated value for that method
SWITCHES = {
    ("er", "mkd_ocl"): ["train.learning_rate=0.0005"],  # ER,cifar10,m500mbs64sbs10: Adam 5e-4
    ("er", "ccl_dc"): ADAMW,
    ("er", "torch_init"): ["model.initializer=torch"],
    ("er_ace", "mkd_ocl"): ["train.learning_rate=0.0005"],  # no inc config at 500: its parser's Adam 5e-4
    ("er_ace", "ccl_dc"): ADAMW,
    ("er_ace", "torch_init"): ["model.initializer=torch"],
    ("derpp", "mkd_ocl"): ["train.optimizer=adam", "train.learning_rate=0.0001", *DERPP_WEIGHTS],
    ("derpp", "mkd_ocl_one_pass"): ["train.optimizer=adam", "train.learning_rate=0.0001", *DERPP_WEIGHTS,
                                    "method.one_pass=true"],
    ("derpp", "ccl_dc"): [*ADAMW, *DERPP_WEIGHTS],
    ("derpp", "torch_init"): ["model.initializer=torch"],
}
#: added before their runs (rerun_settings.md, rule 7): BatchNorm's statistics from the memory at test time
SWITCHES.update({(m, "memory_bn"): ["method.test_batchnorm=memory"] for m in METHODS})
OPTIMIZER_SWITCHES = ("mkd_ocl", "mkd_ocl_one_pass", "ccl_dc")  # at most one of them is adopted
#: rule 7b: (method, switch) decided by its mean over seeds 0-2 against the preset's on the same seeds
OVER_SEEDS = {("er", "memory_bn")}
SEEDS = (1, 2)  # beside seed 0, the switches' own runs
ONPRO = {"onpro-preset": [], "onpro-ccl_dc": [*ADAMW, "method.weight_decay=0"]}


def folder(name: str) -> str:
    return EARLIER.get(name) if name in EARLIER and os.path.exists(EARLIER[name]) else os.path.join(OUT, name)


def acc(name: str):
    try:
        with open(os.path.join(folder(name), "results.json")) as handle:
            return json.load(handle)["acc"]
    except FileNotFoundError:
        return None


def seed_tag(seed) -> str:
    """A run name's seed suffix: none for seed 0 (the switches' own runs), else ``-seed<k>``."""
    return "" if str(seed) == "0" else f"-seed{seed}"


def over_seeds(method: str, switch: str):
    """Rule 7b: the mean over seeds 0-2 of the switch's validation ACC less the preset's on the same seed
    (None while a run is missing)."""
    tags = [seed_tag(s) for s in (0, *SEEDS)]
    pairs = [(acc(f"{method}-{switch}{tag}"), acc(f"{method}-preset{tag}")) for tag in tags]
    if any(a is None for pair in pairs for a in pair):
        return None
    return sum(a - b for a, b in pairs) / len(pairs)


def adopted(method: str) -> list[str]:
    """The rule's stage 1: the switches that beat the preset by more than MARGIN (of the optimizer
    switches, the best one only; those of OVER_SEEDS by their mean over seeds 0-2); [] while a run is missing."""
    preset = acc(f"{method}-preset")
    scores = {switch: acc(f"{m}-{switch}") for m, switch in SWITCHES if m == method}
    if preset is None or None in scores.values():
        return []
    gains = {s: over_seeds(method, s) if (method, s) in OVER_SEEDS else a - preset for s, a in scores.items()}
    if None in gains.values():
        return []
    wins = [s for s, gain in gains.items() if gain > MARGIN]
    optimizers = sorted((s for s in wins if s in OPTIMIZER_SWITCHES), key=scores.get)
    return [s for s in wins if s not in OPTIMIZER_SWITCHES] + optimizers[-1:]


def at_twenty(method: str):
    """The validation ACC of ``method`` with its adopted switches on 20 filters (stage 2's baseline)."""
    chosen = adopted(method)
    return acc(f"{method}-{'preset' if not chosen else chosen[0] if len(chosen) == 1 else 'adopted'}")


def width_decision(method: str) -> str:
    wide, narrow = acc(f"{method}-adopted-64"), at_twenty(method)
    if wide is None or narrow is None:
        return "not yet"
    return f"64 filters ({wide - narrow:+.2f})" if wide > narrow + MARGIN else f"20 filters (64: {wide - narrow:+.2f})"


def settings_of(method: str, switches: list[str]) -> list[str]:
    return [value for s in switches for value in SWITCHES[method, s]]


def plan(study: str) -> dict:
    """{run name: (method, --set values)} of ``study``."""
    if study == "switches":
        runs = {f"{m}-preset": (m, []) for m in METHODS}
        runs.update({f"{m}-{s}": (m, values) for (m, s), values in SWITCHES.items()})
        return runs
    if study == "width":
        runs = {}
        for m in METHODS:
            chosen = settings_of(m, adopted(m))
            if len(adopted(m)) > 1:
                runs[f"{m}-adopted"] = (m, chosen)
            runs[f"{m}-adopted-64"] = (m, [*chosen, "model.filters=64"])
        return runs
    if study == "order":
        runs = {f"er-random-seed{s}": ("er", ["benchmark.class_order=random", f"seed={s}"]) for s in (0, 1, 2)}
        runs.update({f"er-preset-seed{s}": ("er", [f"seed={s}"]) for s in SEEDS})
        return runs
    if study == "memory_bn_seeds":
        runs = {}
        for m, switch in sorted(OVER_SEEDS):
            for s in SEEDS:
                runs[f"{m}-{switch}-seed{s}"] = (m, [*SWITCHES[m, switch], f"seed={s}"])
                runs[f"{m}-preset-seed{s}"] = (m, [f"seed={s}"])
        return runs
    return {name: ("onpro", values) for name, values in ONPRO.items()}


def command(name: str, method: str, values: list[str]) -> list[str]:
    sets = [a for value in [f"method.name={method}", *values] for a in ("--set", value)]
    return [sys.executable, "-m", "gcl_tf.train", *BASE, *sets, "--output", os.path.join(OUT, name)]


def run(study: str, only, listing: bool) -> None:
    for name, (method, values) in plan(study).items():
        if (only and name not in only) or acc(name) is not None:
            continue
        resume = ["--resume"] if os.path.isdir(os.path.join(OUT, name, "checkpoints")) else []
        print(" ".join(["python", *command(name, method, values)[1:], *resume]), flush=True)
        if not listing:
            subprocess.run(command(name, method, values) + resume, check=True)
            write_table()


def write_table() -> None:
    lines = ["# Re-run settings on validation (issue 70)", "",
             "Written by `python docs/results/split_cifar10_ocl/rerun_switches.py table`; the rule: "
             "docs/reproducing/rerun_settings.md. Validation ACC % (seed 0 unless named; against the preset "
             "on the same seed), whole stream.", "",
             "| run | settings | ACC | vs preset |", "| --- | --- | --- | --- |"]
    written = set()
    for study in ("switches", "width", "order", "memory_bn_seeds", "onpro"):
        for name, (method, values) in plan(study).items():
            if name in written:  # a run two studies share (ER's preset on seeds 1-2)
                continue
            written.add(name)
            seed = name.rsplit("-seed", 1)[1] if "-seed" in name else 0
            a, preset = acc(name), acc(f"{method}-preset{seed_tag(seed)}")  # the preset on the same seed
            delta = "" if a is None or preset is None or "-preset" in name else f"{a - preset:+.2f}"
            shown = ", ".join(f"`{v}`" for v in values) or "the preset"
            lines.append(f"| {name} | {shown} | {'-' if a is None else f'{a:.2f}'} | {delta} |")
    mean = over_seeds("er", "memory_bn")
    lines += ["", "Rule 7b, ER's memory_bn over seeds 0-2 (mean of the differences): "
              + ("-" if mean is None else f"{mean:+.2f}")]
    lines += ["", "Stage 1 adopts: " + "; ".join(f"{m}: {', '.join(adopted(m)) or 'none (yet)'}" for m in METHODS),
              "", "Stage 2, the trunk: " + "; ".join(f"{m}: {width_decision(m)}" for m in METHODS)]
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "decisions.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", choices=["switches", "memory_bn_seeds", "width", "order", "onpro", "all", "table"])
    parser.add_argument("--only", default=None, help="run names, comma-separated")
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    only = args.only.split(",") if args.only else None
    studies = {"all": ["switches", "memory_bn_seeds", "width", "order"], "table": []}.get(args.study, [args.study])
    for study in studies:
        run(study, only, args.list)
    if not args.list:
        write_table()


if __name__ == "__main__":
    main()
