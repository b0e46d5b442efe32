"""Why GCL does not learn on the baselines' ResNet-18 under today's protocol (issue 69): the
library's switches one at a time and together, on validation, with the step's loss terms and the
fraction of contexts the graph regulariser holds, step by step.

Studies (each a list of runs of ``python -m gcl_tf.train``, one folder a run, skipped when its
results.json exists, so the command resumes where it stopped):

- ``first_task``: Split CIFAR10's first task (classes 0 and 1), 3,000 training images, 10% of them
  held out as validation (2,700 to learn, 270 steps of 10), memory 500, ``benchmark.augment: ocl``,
  the reduced ResNet-18 with 20 filters, seed 0: the
  docs/reproducing/todays_protocol_diagnosis.md first-task setup on validation.
- ``short_stream``: the whole stream, 1,000 images a task (900 to learn, 100 held out), memory 500.

Each run logs its loss terms every step (``train.log_every: 1``); this script reads them from the
run's TensorBoard events into ``steps.json`` (what results in git keep) and writes ``table.md``:

    python docs/results/gcl_today/diagnose.py first_task     # from the folder holding data/cifar10.npz
    python docs/results/gcl_today/diagnose.py short_stream
    python docs/results/gcl_today/diagnose.py table          # the tables only, from what has run
    python docs/results/gcl_today/diagnose.py seeds --only todays,todays_teacher,todays_distill  # over seeds 0-2
    python docs/results/gcl_today/diagnose.py probe          # what carries the label (first_task)

``probe`` reads each finished first-task GCL learner (``learner.keras``, kept on the machine that
ran it) on its own validation split (the 300 held-out images): the head as evaluated on the
expected graph, its two parts alone (the graph's term ``f_theta3(ReLU(Z))``, and with
``own_latent`` the image's own term), the memory's vote along the expected graph, and the share of
the memory a row weighs alike (effective neighbours); into ``first_task/probe.json`` and ``probe.md``.

``probe_last_task FOLDER...`` reads finished GCL runs of Split CIFAR10 on their last task's training
images (where GCL's warning for a task near chance looks), among all classes and the task's two
(:func:`probe_last_task`).

``predictions [--only NAME,...]`` reads three-task learners (``five_tasks/NAME``: the whole stream's) by
the head, the vote, both together and the nearest class mean (rules 10 and 11, :func:`read_predictions`).

``--only NAME[,NAME]`` runs some variants; ``--list`` prints the commands.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

BASE = ["--config", os.path.join(ROOT, "configs", "split_cifar10_ocl.yaml"), "--set", "method.name=gcl",
        "--set", "model.backbone=resnet18", "--set", "model.filters=20",
        "--set", "benchmark.validation_fraction=0.1", "--set", "eval.split=validation",
        "--set", "benchmark.source=npz", "--set", "benchmark.path=data/cifar10.npz",
        "--set", "train.log_every=1", "--set", "seed=0"]
#: The today's preset as the rules ran on it, before rule 28 gave configs/split_cifar10_ocl.yaml's gcl the
#: memory's BatchNorm statistics at test time: every ``todays*`` variant starts from it (a variant's own keys after).
BEFORE_RULE_28 = ["method.test_batchnorm=moving"]
#: The paper's GCL, the today's preset before issue 69 (its switches off), which the variants change.
PAPER = ["method.regularize_below=null", "method.kernel_width=null", "method.own_latent=false",
         "method.target_loss=all", "method.edge_memory=matrix", "method.context_batch=null", "model.hidden_size=256",
         *BEFORE_RULE_28]


STUDIES = {
    "first_task": ["--set", "benchmark.num_tasks=1", "--set", "benchmark.samples_per_task=3000"],
    "short_stream": ["--set", "benchmark.samples_per_task=1000"],
    # the whole stream (5 tasks), where the test runs' LA gap to ER shows and three tasks do not show it
    "five_tasks": ["--set", "benchmark.samples_per_task=null", "--set", "train.log_every=10"],
    # the new user's stream: 200 images a task (here 220: 198 learned, 22 held out)
    "tiny_stream": ["--set", "benchmark.samples_per_task=220"],
    # the short stream on the test split (the goal: LA at least ER's on 1,000 images a task), seeds 0-2
    "short_test": ["--set", "benchmark.samples_per_task=1000", "--set", "benchmark.validation_fraction=0.0",
                   "--set", "eval.split=test"],
    "three_tasks": ["--set", "benchmark.num_tasks=3", "--set", "benchmark.samples_per_task=null",
                    "--set", "train.log_every=10"],
}

#: The library's switches (docs/gcl.md): the today's preset has each at the paper's value.
SWITCHES = {
    "regularize_below": "method.regularize_below=1.0",
    "graph_lambda_0": "method.graph_lambda=0",
    "own_latent": "method.own_latent=true",
    "target_present": "method.target_loss=present",
    "normalized": "method.kernel=normalized",
    "median": "method.kernel_width=median",
}
TOGETHER = ["regularize_below", "own_latent", "target_present", "median"]  # the library's defaults

VARIANTS = {  # in the order they run
    "preset": [],
    "own_latent": [SWITCHES["own_latent"]],
    "regularize_below": [SWITCHES["regularize_below"]],
    "defaults": [SWITCHES[n] for n in TOGETHER],
    "er": ["method.name=er"],
    "graph_lambda_0": [SWITCHES["graph_lambda_0"]],
    "defaults_normalized": [SWITCHES[n] for n in TOGETHER] + [SWITCHES["normalized"]],
    "regularize_below_0.3": ["method.regularize_below=0.3"],
    "target_present": [SWITCHES["target_present"]],
    "median": [SWITCHES["median"]],
    "normalized": [SWITCHES["normalized"]],
}
FIRST_TASK = list(VARIANTS)  # the first task's runs (the variants below are other studies')
#: The levers (docs/gcl_today.md, "The levers"): each on the library's defaults with contexts drawn
#: as a replay batch of 64 (the step of ER's cost); the vote read beside the head in every run.
REPLAY_CONTEXTS = ["method.edge_memory=embeddings", "method.context_batch=64", "method.also_test_predictions=[vote]"]
CONTEXTS_128 = ["method.edge_memory=embeddings", "method.context_batch=128", "method.also_test_predictions=[vote]"]
LEVERS = {
    "defaults_cb64": [SWITCHES[n] for n in TOGETHER] + REPLAY_CONTEXTS,
    "defaults_cb64_gl0": [SWITCHES[n] for n in TOGETHER] + REPLAY_CONTEXTS + [SWITCHES["graph_lambda_0"]],
    "defaults_cb64_gl0_normalized": [SWITCHES[n] for n in TOGETHER] + REPLAY_CONTEXTS
    + [SWITCHES["graph_lambda_0"], SWITCHES["normalized"], "method.kernel_width=0.1"],
    "defaults_cb64_normalized": [SWITCHES[n] for n in TOGETHER] + REPLAY_CONTEXTS
    + [SWITCHES["normalized"], "method.kernel_width=0.1"],
    # rule 5 after the batch of 64 fell 6.2 below the whole memory on the short stream: 128, about
    # the most a step of at most twice ER's (10 + 64 images) affords
    "defaults_cb128": [SWITCHES[n] for n in TOGETHER] + CONTEXTS_128,
    # the regulariser that waits until the stored edges carry the label (rule 6), on the base and
    # with the paper's head (the label reaching the trunk only through the graph)
    "defaults_cb64_selective": [SWITCHES[n] for n in TOGETHER] + REPLAY_CONTEXTS + ["method.regularize_selective=0.5"],
    "defaults_cb64_selective_paper_head": [SWITCHES[n] for n in TOGETHER] + REPLAY_CONTEXTS
    + ["method.regularize_selective=0.5", "method.own_latent=false"],
    # rule 7, learning the incoming classes: on the preset (128 contexts) the incoming images' loss
    # over every class, and a lighter hold
    "cb128_target_all": [SWITCHES[n] for n in TOGETHER] + CONTEXTS_128 + ["method.target_loss=all"],
    "cb128_gl10": [SWITCHES[n] for n in TOGETHER] + CONTEXTS_128 + ["method.graph_lambda=10"],
    # rule 9: two views of each incoming image in one trunk pass (one set of BatchNorm statistics)
    "cb128_views2": [SWITCHES[n] for n in TOGETHER] + CONTEXTS_128 + ["method.target_views=2"],
}
VARIANTS.update(LEVERS)
VARIANTS["todays"] = []  # the today's GCL preset before rule 28 (command: BEFORE_RULE_28)
VARIANTS["todays_gl0"] = ["method.graph_lambda=0"]  # it with the advice of its warning on the tiny stream
VARIANTS["todays_vote"] = ["method.vote_lambda=1.0"]  # rule 13: the graph trained to carry the label itself
VARIANTS["todays_vote_present"] = ["method.vote_lambda=1.0", "method.vote_targets=present"]  # rule 14: ACE's asymmetry
VARIANTS["todays_vote_ncm"] = ["method.vote_lambda=1.0", "method.test_prediction=ncm"]  # rule 15's pair, read by its LA
#: rule 12: the published re-runs' settings that issue 70's stage 1 tries on the baselines, on the preset
#: (docs/reproducing/rerun_settings.md; the values of rerun_switches.py's ER switches)
VARIANTS.update({"todays_mkd_ocl": ["train.learning_rate=0.0005"],
                 "todays_ccl_dc": ["train.optimizer=adamw", "train.learning_rate=0.0005", "train.weight_decay=0.0001"],
                 "todays_torch_init": ["model.initializer=torch"]})
#: rule 15: the preset and rule 13's pair on seeds 1 and 2 of validation (each seed its own held-out 10%; the pair's
#: seed 2 was not run: seed 1 decided the rule)
VARIANTS.update({f"{name}_seed{seed}": [*VARIANTS[name], f"seed={seed}"] for seed in (1, 2)
                 for name in ("todays", "todays_vote")})
#: rule 17: evaluating the weights' moving average (train.ema_momentum), on the preset's three validation seeds, and on
#: ER's preset beside it (seed 0)
VARIANTS["todays_ema"] = ["train.ema_momentum=0.99"]
VARIANTS.update({f"todays_ema_seed{seed}": ["train.ema_momentum=0.99", f"seed={seed}"] for seed in (1, 2)})
VARIANTS["er_ema"] = ["method.name=er", "train.ema_momentum=0.99"]
#: rule 18: the regulariser held to the weights' average (a momentum teacher) instead of the stored edges
VARIANTS["todays_teacher"] = ["train.ema_momentum=0.99", "method.graph_target=average"]
VARIANTS.update({f"todays_teacher_seed{seed}": [*VARIANTS["todays_teacher"], f"seed={seed}"] for seed in (1, 2)})
#: rule 27 joined: the preset with rules 17, 18 and 27 (BatchNorm's statistics from the memory at test time)
VARIANTS["todays_bn"] = [*VARIANTS["todays_teacher"], "method.test_batchnorm=memory"]
#: rule 27's statistics on the preset alone (no weights' average)
VARIANTS["todays_bn_only"] = ["method.test_batchnorm=memory"]
VARIANTS.update({f"todays_bn_only_seed{seed}": [*VARIANTS["todays_bn_only"], f"seed={seed}"] for seed in (1, 2)})
#: ER with the same statistics, and ER's seeds 1-2 (the short stream's test reading, rule 28's preset against ER)
VARIANTS["er_bn"] = ["method.name=er", "method.test_batchnorm=memory"]
#: ER-ACE: the incoming images' loss among their batch's classes, as GCL's (target_loss: present)
VARIANTS["er_ace_bn"] = ["method.name=er_ace", "method.test_batchnorm=memory"]
VARIANTS.update({f"{name}_seed{seed}": [*VARIANTS[name], f"seed={seed}"] for seed in (1, 2)
                 for name in ("er", "er_bn", "er_ace_bn")})
SHORT_TEST = [f"{name}{suffix}" for suffix in ("", "_seed1", "_seed2")
              for name in ("er", "er_bn", "todays", "todays_bn_only", "er_ace_bn")]
#: rule 19: rule 18 with the average's predictions distilled too (MKD's weight and temperature)
VARIANTS["todays_distill"] = [*VARIANTS["todays_teacher"], "method.distill_lambda=5.5", "method.distill_temperature=4"]
VARIANTS.update({f"todays_distill_seed{seed}": [*VARIANTS["todays_distill"], f"seed={seed}"] for seed in (1, 2)})
#: rule 20: rule 19 with the contexts' predictions distilled, not the incoming images'
VARIANTS["todays_distill_contexts"] = [*VARIANTS["todays_distill"], "method.distill_targets=false"]
VARIANTS.update({f"todays_distill_contexts_seed{seed}": [*VARIANTS["todays_distill_contexts"], f"seed={seed}"]
                 for seed in (1, 2)})
#: rule 21: rule 19 with the incoming images' cross-entropy over every class (MKD's ER with its distillation)
VARIANTS["todays_mkd_er"] = [*VARIANTS["todays_distill"], "method.target_loss=all"]
VARIANTS.update({f"todays_mkd_er_seed{seed}": [*VARIANTS["todays_mkd_er"], f"seed={seed}"] for seed in (1, 2)})
#: rule 22: rule 21 with the distillation's pull at most twice the cross-entropy's (lambda T = 2, MKD's 22)
VARIANTS["todays_mkd_er_half"] = [*VARIANTS["todays_teacher"], "method.distill_lambda=0.5",
                                  "method.distill_temperature=4", "method.target_loss=all"]
VARIANTS.update({f"todays_mkd_er_half_seed{seed}": [*VARIANTS["todays_mkd_er_half"], f"seed={seed}"]
                 for seed in (1, 2)})
#: rule 23: rule 22 with the contexts' predictions distilled, the incoming images' left to their full cross-entropy
VARIANTS["todays_mkd_er_ctx"] = [*VARIANTS["todays_mkd_er_half"], "method.distill_targets=false"]
VARIANTS.update({f"todays_mkd_er_ctx_seed{seed}": [*VARIANTS["todays_mkd_er_ctx"], f"seed={seed}"] for seed in (1, 2)})
#: rule 25: rule 22 with the distillation through the head's own term alone (the graph's prior not distilled)
VARIANTS["todays_mkd_er_own"] = [*VARIANTS["todays_mkd_er_half"], "method.distill_part=own_gradient"]
VARIANTS.update({f"todays_mkd_er_own_seed{seed}": [*VARIANTS["todays_mkd_er_own"], f"seed={seed}"] for seed in (1, 2)})
#: rule 26: rule 22 with the own term's logits distilled to the average's own term's (the graph's term left alone)
VARIANTS["todays_mkd_er_ownterm"] = [*VARIANTS["todays_mkd_er_half"], "method.distill_part=own"]
VARIANTS.update({f"todays_mkd_er_ownterm_seed{seed}": [*VARIANTS["todays_mkd_er_ownterm"], f"seed={seed}"]
                 for seed in (1, 2)})
THREE_TASKS = [*LEVERS, "er"]
SHORT_STREAM = ["todays", "er", "defaults_cb64", "defaults", "preset", "defaults_cb128", "defaults_cb64_selective",
                "defaults_cb64_selective_paper_head", "cb128_target_all", "cb128_gl10",
                "todays_vote", "todays_vote_present", "todays_vote_ncm", "todays_teacher", "todays_bn",
                "todays_bn_only"]
TAGS = ("loss", "target_loss", "context_loss", "graph_loss", "regularized_fraction")


def command(study: str, variant: str) -> list[str]:
    # ER its own preset; todays GCL's as the rules ran on it; the others the paper's GCL
    paper = BEFORE_RULE_28 if variant.startswith("todays") else [] if variant.startswith("er") else PAPER
    sets = [a for value in [*paper, *VARIANTS[variant]] for a in ("--set", value)]
    return [sys.executable, "-m", "gcl_tf.train", *BASE, *STUDIES[study], *sets,
            "--output", os.path.join(HERE, study, variant)]


def read_steps(folder: str) -> dict:
    """The per-step scalars ``train/<tag>`` of a run's TensorBoard events: {tag: [[step, value], ...]}."""
    import tensorflow as tf

    out: dict = {}
    for path in sorted(glob.glob(os.path.join(folder, "tensorboard", "**", "events.out.tfevents.*"), recursive=True)):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if not value.tag.startswith("train/"):
                    continue
                number = float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
                out.setdefault(value.tag[len("train/"):], {})[int(event.step)] = number
    return {tag: sorted(values.items()) for tag, values in out.items()}


def run(study: str, only: list[str] | None) -> None:
    names = only or {"first_task": FIRST_TASK, "short_stream": SHORT_STREAM, "three_tasks": THREE_TASKS,
                     "tiny_stream": ["todays", "er", "todays_gl0"], "short_test": SHORT_TEST,
                     "five_tasks": ["todays", "todays_vote", "todays_vote_present", "todays_seed1", "todays_vote_seed1",
                                    "todays_seed2", "todays_mkd_ocl", "todays_ccl_dc", "todays_torch_init",
                                    "todays_ema", "er_ema", "todays_ema_seed1", "todays_ema_seed2", "todays_teacher",
                                    "todays_teacher_seed1", "todays_teacher_seed2", "todays_distill",
                                    "todays_distill_seed1", "todays_distill_seed2", "todays_distill_contexts",
                                    "todays_distill_contexts_seed1", "todays_distill_contexts_seed2", "todays_mkd_er",
                                    "todays_mkd_er_seed1", "todays_mkd_er_seed2", "todays_mkd_er_half",
                                    "todays_mkd_er_half_seed1", "todays_mkd_er_half_seed2", "todays_mkd_er_ctx_seed1",
                                    "todays_mkd_er_ctx", "todays_mkd_er_ctx_seed2", "todays_mkd_er_own_seed1",
                                    "todays_mkd_er_own", "todays_mkd_er_own_seed2"]}[study]
    for variant in names:
        folder = os.path.join(HERE, study, variant)
        if os.path.exists(os.path.join(folder, "results.json")) and os.path.exists(os.path.join(folder, "steps.json")):
            continue
        if not os.path.exists(os.path.join(folder, "results.json")):
            resume = ["--resume"] if os.path.isdir(os.path.join(folder, "checkpoints")) else []
            print(" ".join(command(study, variant)[1:] + resume), flush=True)
            subprocess.run(command(study, variant) + resume, check=True)
        with open(os.path.join(folder, "steps.json"), "w") as f:
            json.dump(read_steps(folder), f)
        write_table(study)


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def window(series: list, lo: float, hi: float) -> list[float]:
    """The values of ``series`` ([[step, value], ...]) from a fraction ``lo`` to ``hi`` of its steps."""
    n = len(series)
    return [v for _, v in series[int(lo * n):max(int(hi * n), int(lo * n) + 1)]]


def row(study: str, variant: str) -> str | None:
    folder = os.path.join(HERE, study, variant)
    try:
        with open(os.path.join(folder, "results.json")) as f:
            results = json.load(f)
        with open(os.path.join(folder, "steps.json")) as f:
            steps = json.load(f)
    except FileNotFoundError:
        return None
    setting = ", ".join(f"`{v}`" for v in VARIANTS[variant]) or (
        "the today's preset before rule 28" if variant == "todays" else "the preset (the paper's GCL)")
    matrix = results["accuracy_matrix"]
    cells = [f"{results['acc']:.1f}"]
    vote = results.get("evaluations", {}).get("vote")
    if study == "three_tasks":
        cells.append(f"{vote['acc']:.1f}" if vote else "-")
    if study != "first_task":
        cells += [f"{results['learning_accuracy']:.1f}", f"{results['fgt']:.1f}",
                  ", ".join(f"{matrix[t][t]:.0f}" for t in range(len(matrix)))]
    for tag in ("context_loss", "target_loss"):
        cells.append(f"{mean(window(steps.get(tag, []), 2 / 3, 1)):.3f}" if tag in steps else "-")
    held = steps.get("regularized_fraction", [])
    if held:
        spans = ((0, 0.1), (0.1, 0.33), (0.33, 0.67), (0.67, 1))
        cells.append(" / ".join(f"{mean(window(held, lo, hi)):.2f}" for lo, hi in spans))
    else:
        cells.append("-")
    cells.append(f"{results['train_seconds']:.0f}")
    return f"| {variant} | {setting} | " + " | ".join(cells) + " |"


def write_table(study: str) -> None:
    split = "test" if study == "short_test" else "validation"
    head = ["variant", "switches (beside the today's preset on the ResNet-18)", f"{split} ACC"]
    if study == "three_tasks":
        head.append("vote ACC")
    if study != "first_task":
        head += ["LA", "FGT", "each task just after it"]
    head += ["context loss (last third)", "target loss (last third)",
             "contexts held by L_G (steps 0-10% / 10-33% / 33-67% / 67-100%)", "train s"]
    rows = [r for v in VARIANTS if (r := row(study, v))]
    text = "| " + " | ".join(head) + " |\n|" + " --- |" * len(head) + "\n" + "\n".join(rows) + "\n"
    with open(os.path.join(HERE, study, "table.md"), "w") as f:
        f.write(text)


def seed_summary(variants: list[str]) -> None:
    """Each five_tasks variant over validation seeds 0-2 (``V``, ``V_seed1``, ``V_seed2``; the
    preset's are ``todays``, ``todays_seed1``, ``todays_seed2``): ACC, LA and FGT as mean ± std, and
    each one's ACC gain by seed over the first named, with its mean ± standard error (rules 16-18)."""
    def runs(variant):
        out = []
        for name in [variant, f"{variant}_seed1", f"{variant}_seed2"]:
            with open(os.path.join(HERE, "five_tasks", name, "results.json")) as f:
                out.append(json.load(f))
        return out

    def spread(values):
        return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"

    base = [r["acc"] for r in runs(variants[0])]
    for variant in variants:
        results = runs(variant)
        acc = [r["acc"] for r in results]
        gains = [a - b for a, b in zip(acc, base)]
        print(f"{variant}: ACC {', '.join(f'{a:.2f}' for a in acc)} = {spread(acc)}; "
              f"LA {spread([r['learning_accuracy'] for r in results])}; FGT {spread([r['fgt'] for r in results])}; "
              f"gain over {variants[0]} {', '.join(f'{g:+.2f}' for g in gains)} = {statistics.mean(gains):+.2f} ± "
              f"{statistics.stdev(gains) / len(gains) ** 0.5:.2f} (s.e.)")


def probe_learner(folder: str) -> dict:
    """What carries the label in one first-task learner (see the module docstring), in %."""
    import gcl_tf
    from gcl_tf.methods.gcl.prediction import first_examples

    model = gcl_tf.load_model(os.path.join(folder, "learner.keras"), compile=False)
    stream = gcl_tf.benchmarks.split(gcl_tf.data.load("cifar10", source="npz", path="data/cifar10.npz"),
                                     num_tasks=1, samples_per_task=3000, seed=0, validation_fraction=0.1)
    images, labels = first_examples(stream.tasks[0].validation, 10**6)
    return label_carriers(model, images, labels, within_task=True)


def label_carriers(model, images, labels, within_task: bool) -> dict:
    """The head's accuracy on ``images`` and its parts' (%): as evaluated on the expected graph, the
    graph's term alone, the own term alone, the memory's vote; among the task's classes
    (``within_task``) or all; the share of the memory a row weighs alike (effective neighbours); and
    each term's lift: the mean logit of the task's classes minus the other classes'."""
    import numpy as np
    import tensorflow as tf

    from gcl_tf.data.streams import to_float
    from gcl_tf.methods.gcl.graph import edge_logits, label_vote_logits, neighbourhoods

    images = to_float(images)
    filled = int(model.memory.num_filled.numpy())
    u_c, l_c = model.embed(to_float(model.memory.images[:filled]), training=False)
    u_t, l_t = model.embed(images, training=False)
    graph = tf.sigmoid(edge_logits(u_t, u_c, model.kernel_log_scale))  # [N, C] expected test graph
    values = model.context_values(l_c, model.memory.labels[:filled], tf.ones([filled], tf.bool))
    graph_part = model.classify(graph, values)  # f_theta3(ReLU(Z)) alone
    own = model.own_logits(l_t)
    vote = label_vote_logits(graph, tf.one_hot(model.memory.labels[:filled], model.num_classes))

    def acc(logits):
        mask = np.full(model.num_classes, -np.inf)
        mask[np.unique(labels)] = 0.0  # the task's two classes: chance is 50
        mask = mask if within_task else np.zeros(model.num_classes)
        return round(100.0 * float(np.mean(np.argmax(np.asarray(logits) + mask, 1) == labels)), 1)

    def lift(logits):  # the task's classes' mean logit over the other classes' (rule 24's reading)
        task = np.isin(np.arange(model.num_classes), labels)
        return round(float(np.mean(np.asarray(logits)[:, task]) - np.mean(np.asarray(logits)[:, ~task])), 2)

    no_edge, spread = neighbourhoods(graph.numpy())
    return {"head": acc(graph_part if own is None else graph_part + own), "graph_term": acc(graph_part),
            "own_term": None if own is None else acc(own), "vote": acc(vote),
            "effective_neighbours": round(100.0 * spread, 1), "no_edge": round(100.0 * no_edge, 1),
            "graph_term_lift": lift(graph_part), "own_term_lift": None if own is None else lift(own)}


def own_term_tasks(model, x, y, batch: int) -> list[float]:
    """Each task's accuracy (%, two classes a task) of the head's own term alone (``own_latent``:
    W_own ReLU(l) of each image, no graph), as the model evaluates (with the average, if any)."""
    import numpy as np

    from gcl_tf.data.streams import to_float

    with model.evaluation_scope():
        latents = [model.embed(to_float(x[i:i + batch]), training=False)[1] for i in range(0, len(x), batch)]
        predicted = np.concatenate([np.argmax(model.own_logits(latent), -1) for latent in latents])
    task = y // 2
    return [float(100 * np.mean(predicted[task == t] == y[task == t])) for t in range(int(task.max()) + 1)]


def read_predictions(variants: list[str]) -> None:
    """Rules 10 and 11: each finished learner (``variants``: a three-task run's name, or
    ``five_tasks/NAME``; learner.keras kept) on its own validation images, read by the head (as its
    run evaluated it: the check), the vote, the two together (``head_vote``), the nearest class
    mean (``ncm``), the head with the memory's BatchNorm statistics (``memory_batchnorm``, rule 27)
    and the head's own term alone (``own_term``); ACC is the mean over the tasks; into
    ``predictions.json`` of the study's folder."""
    import numpy as np
    import yaml

    import gcl_tf
    from gcl_tf.methods.gcl.prediction import first_examples

    sys.path.insert(0, os.path.join(ROOT, "docs", "results", "split_cifar10_ocl"))
    from gcl_predictions import accuracies

    for name in variants:
        study, variant = name.split("/") if "/" in name else ("three_tasks", name)
        folder = os.path.join(HERE, study, variant)
        config = yaml.safe_load(open(os.path.join(folder, "config.yaml")))
        stream = gcl_tf.benchmarks.split(gcl_tf.data.load("cifar10", source="npz", path="data/cifar10.npz"),
                                         num_tasks={"three_tasks": 3, "five_tasks": 5}[study], seed=config["seed"],
                                         validation_fraction=0.1)
        parts = [first_examples(task.validation, 10**6) for task in stream.tasks]
        x = np.concatenate([p[0] for p in parts]).astype("float32") / 255.0
        y = np.concatenate([p[1] for p in parts])
        path = os.path.join(HERE, study, "predictions.json")
        out = json.load(open(path)) if os.path.exists(path) else {}
        batch = int(config["eval"]["batch_size"])
        # with its optimizer: a run that evaluated the weights' average (train.ema_momentum) is read with it
        model = gcl_tf.load_model(os.path.join(folder, "learner.keras"))
        row = {"results_json_acc": json.load(open(os.path.join(folder, "results.json")))["acc"]}
        for prediction in ("head", "vote", "head_vote", "ncm"):
            with model.evaluation_variant({"test_prediction": prediction}):
                tasks = accuracies(model, x, y, 2, batch)["tasks"]
            row[prediction] = {"acc": float(np.mean(tasks)), "tasks": tasks}
        with model.evaluation_variant({"test_batchnorm": "memory"}):  # the memory's BatchNorm statistics (rule 27)
            tasks = accuracies(model, x, y, 2, batch)["tasks"]
        row["memory_batchnorm"] = {"acc": float(np.mean(tasks)), "tasks": tasks}
        if model.own_latent:  # the head's own term alone (rule 24's reading)
            tasks = own_term_tasks(model, x, y, batch)
            row["own_term"] = {"acc": float(np.mean(tasks)), "tasks": tasks}
        out[variant] = row
        print(name, json.dumps(row), flush=True)
        with open(path, "w") as f:
            json.dump(out, f, indent=1)


def probe_last_task(folders: list[str]) -> None:
    """Each finished GCL run of Split CIFAR10 (``folders``, learner.keras kept) on its last task's
    first 2,000 training images, where GCL's warning for a task near chance looks: the head and
    its parts among all classes and among the task's two, the share of the memory's labels of the
    task's classes; into ``last_task_probe.json`` beside this script."""
    import numpy as np
    import yaml

    import gcl_tf
    from gcl_tf.methods.gcl.prediction import first_examples

    path = os.path.join(HERE, "last_task_probe.json")
    out = json.load(open(path)) if os.path.exists(path) else {}
    for folder in folders:
        config = yaml.safe_load(open(os.path.join(folder, "config.yaml")))
        b = config["benchmark"]
        model = gcl_tf.load_model(os.path.join(folder, "learner.keras"))  # with its optimizer: the average
        stream = gcl_tf.benchmarks.split(gcl_tf.data.load("cifar10", source="npz", path=b["path"]),
                                         num_tasks=b["num_tasks"], seed=config["seed"])
        images, labels = first_examples(stream.tasks[-1].train, 2000)
        memory = model.memory.labels[:int(model.memory.num_filled.numpy())].numpy()
        name = os.path.relpath(os.path.abspath(folder), ROOT)
        with model.evaluation_scope():  # the weights the run evaluated (train.ema_momentum: their average)
            all_classes = label_carriers(model, images, labels, within_task=False)
            within_task = label_carriers(model, images, labels, within_task=True)
        out[name] = {"memory_size": config["method"]["memory_size"], "task_classes": np.unique(labels).tolist(),
                     "all_classes": all_classes, "within_task": within_task,
                     "memory_share_of_task": round(100.0 * float(np.isin(memory, np.unique(labels)).mean()), 1)}
        print(name, out[name], flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


def probe() -> None:
    out = {}
    for variant in VARIANTS:
        folder = os.path.join(HERE, "first_task", variant)
        if variant != "er" and os.path.exists(os.path.join(folder, "learner.keras")):
            out[variant] = probe_learner(folder)
            print(variant, out[variant], flush=True)
    with open(os.path.join(HERE, "first_task", "probe.json"), "w") as f:
        json.dump(out, f, indent=1)
    head = ["variant", "head (expected graph)", "graph's term alone", "own term alone", "vote",
            "effective neighbours (% of memory)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for variant, r in out.items():
        cells = [r["head"], r["graph_term"], "-" if r["own_term"] is None else r["own_term"], r["vote"],
                 r["effective_neighbours"]]
        lines.append(f"| {variant} | " + " | ".join(str(c) for c in cells) + " |")
    with open(os.path.join(HERE, "first_task", "probe.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", choices=[*STUDIES, "table", "seeds", "probe", "probe_last_task", "predictions"])
    parser.add_argument("folders", nargs="*", help="probe_last_task: finished GCL run folders")
    parser.add_argument("--only", type=lambda s: s.split(","), default=None)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    if args.study == "table":
        for study in STUDIES:
            if os.path.isdir(os.path.join(HERE, study)):
                write_table(study)
        return
    if args.study == "seeds":  # rules 16-18: the preset first, then the levers
        seed_summary(args.only or ["todays"])
        return
    if args.study == "probe":
        probe()
        return
    if args.study == "probe_last_task":
        probe_last_task(args.folders)
        return
    if args.study == "predictions":  # rules 10 and 11, on the learners named by --only
        read_predictions(args.only or ["defaults_cb128"])
        return
    if args.list:
        for variant in args.only or VARIANTS:
            print(" ".join(command(args.study, variant)[1:]))
        return
    run(args.study, args.only)


if __name__ == "__main__":
    main()
