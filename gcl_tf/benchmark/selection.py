"""What ``python -m gcl_tf.benchmark paper`` is asked to run, checked before anything loads: the
studies, benchmarks, methods, memory sizes, trunks and graph_lambda values of its command line, and
the benchmarks each study runs on (:func:`gcl_tf.benchmark.paper.plan` turns them into runs)."""
from __future__ import annotations

import math
import os

from gcl_tf.benchmark import layout
from gcl_tf.errors import ConfigError, UserError

PAPER_BENCHMARKS = ("permuted_mnist", "rotated_mnist", "split_svhn", "split_cifar10", "split_cifar100",
                    "split_miniimagenet")
STUDIES = ("main", "ablation", "memory", "backbone", "graph_lambda")
# The paper's tables and its memory figure; the backbone study is extra, and the paper's λ_G figure
# (graph_lambda: 4 more GCL runs a seed) is asked for by name.
DEFAULT_STUDIES = ("main", "ablation", "memory")
PAPER_STUDY_BENCHMARKS = {"ablation": ("split_cifar10",), "memory": ("split_svhn", "split_cifar10"),
                          "backbone": ("split_cifar10",), "graph_lambda": ("split_cifar10",)}
PAPER_MEMORY_SIZES = (100, 250, 500, 1000)
DEFAULT_SEEDS = 5  # the paper's five runs


def split_names(values) -> list[str]:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]`` (comma-separated and/or repeated)."""
    out = []
    for value in values or ():
        out += [v.strip() for v in str(value).split(",") if v.strip()]
    return out


def available_benchmarks(config_dir: str) -> list[str]:
    if not os.path.isdir(config_dir):
        raise UserError(f"--config-dir: folder {config_dir!r} does not exist")
    return sorted(f[:-5] for f in os.listdir(config_dir) if f.endswith(".yaml"))


def preset_methods(config_path: str) -> list[str]:
    from gcl_tf import config as config_lib

    presets = config_lib.load_yaml(config_path).get("presets") or {}
    if not isinstance(presets, dict):
        raise ConfigError(f"{config_path}: presets: expected a mapping from method name to settings")
    return list(presets)


def study_benchmarks(requested, study: str, selected: list[str]) -> list[str]:
    names = split_names(requested) if requested else list(PAPER_STUDY_BENCHMARKS[study])
    if names == ["all"]:
        return list(selected)
    return [b for b in names if b in selected]


def preset_backbones(config_dir: str, benchmark: str, methods, overrides) -> set:
    """The ``model.backbone`` of each preset of ``benchmark`` (those of ``methods`` if given),
    with ``overrides`` applied (no method keys: before TensorFlow loads)."""
    from gcl_tf import config as config_lib

    path = os.path.join(config_dir, benchmark + ".yaml")
    presets = preset_methods(path)
    chosen = [m for m in (methods or presets) if m in presets]
    return {config_lib.load_config(path, [f"method.name={m}", *overrides]).model.backbone for m in chosen}


def backbone_benchmarks(config_dir: str, benchmarks, every: bool, methods, overrides, log) -> list[str]:
    """The backbone study's benchmarks, checked: the study replaces a preset's trunk (a
    ``layout.BACKBONES`` one: convnet, resnet18) by the other, so each benchmark needs presets on
    one of them (an MLP benchmark, e.g. permuted_mnist, has none). A benchmark named on the
    command line without one is a UserError; with ``all`` (``every``) such a benchmark is left out
    with a note, and a UserError when none is left."""
    trunks = {keys["backbone"] for _, keys in layout.BACKBONES.values()}
    swapped = " or ".join(sorted(trunks))

    def backbones_of(b):
        try:
            return preset_backbones(config_dir, b, methods, overrides)
        except UserError:  # a config that does not load: not one to suggest
            return set()

    used = {b: preset_backbones(config_dir, b, methods, overrides) for b in benchmarks}
    kept = [b for b in benchmarks if not used[b] or used[b] & trunks]  # no preset there: nothing planned anyway
    left_out = [b for b in benchmarks if b not in kept]
    if left_out and (not every or not any(used[b] for b in kept)):
        eligible = [b for b in available_benchmarks(config_dir) if backbones_of(b) & trunks]
        others = ", ".join(sorted(set().union(*(used[b] for b in left_out))))
        what = f"none of {', '.join(left_out)} has a" if every else f"{left_out[0]} has no"
        raise UserError(f"--backbone-benchmarks{' all' if every else ''}: {what} preset on a {swapped} trunk, "
                        f"the trunks the backbone study swaps (the presets use {others}); allowed: "
                        f"{', '.join(eligible) or 'none of the configs in ' + config_dir} (each also in --benchmarks)")
    for b in left_out:
        log(f"note: the backbone study leaves out {b}: its presets use {', '.join(sorted(used[b]))}, "
            f"not a {swapped} trunk")
    return kept


def graph_lambda_values(values) -> list[float]:
    """--graph-lambdas as floats, each 0 or more."""
    out = []
    for value in split_names(values):
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not (math.isfinite(number) and number >= 0.0):
            raise UserError(f"--graph-lambdas: {value!r} is not allowed; allowed: numbers 0 or more, e.g. 0,5,50,500")
        out.append(number)
    return out


def selection(config_dir, benchmarks, methods, seeds, studies, memory_sizes, backbones, graph_lambdas) -> tuple:
    """The command line's choices, checked: (studies, benchmarks, methods, memory sizes, trunks,
    graph_lambda values)."""
    from gcl_tf import methods as methods_lib

    studies = split_names(studies) or list(DEFAULT_STUDIES)
    unknown = [s for s in studies if s not in STUDIES]
    if unknown:
        raise UserError(f"--studies: unknown study {unknown[0]!r}; allowed: {', '.join(STUDIES)}")
    if seeds < 1:
        raise UserError(f"--seeds: {seeds} is not allowed; allowed: 1 or more")
    available = available_benchmarks(config_dir)
    selected = split_names(benchmarks) or list(PAPER_BENCHMARKS)
    for b in selected:
        if b not in available:
            raise UserError(f"--benchmarks: no config {os.path.join(config_dir, b + '.yaml')!r}; "
                            f"allowed: {', '.join(available) or '(none)'}")
    wanted_methods = split_names(methods)
    for m in wanted_methods:
        if m not in methods_lib.names():
            raise UserError(f"--methods: unknown method {m!r}; allowed: {', '.join(methods_lib.names())}")
    sizes = [int(s) for s in split_names(memory_sizes)]
    if any(s < 1 for s in sizes):
        raise UserError("--memory-sizes: every size must be 1 or more")
    trunks = split_names(backbones)
    for t in trunks:
        if t not in layout.BACKBONES:
            raise UserError(f"--backbones: unknown trunk {t!r}; allowed: {', '.join(layout.BACKBONES)}")
    return studies, selected, wanted_methods, sizes, trunks, graph_lambda_values(graph_lambdas)


def benchmarks_of_studies(config_dir, studies, selected, requested, methods, overrides, log) -> dict:
    """``{study: [benchmark]}``: the selected benchmarks each study runs on (``requested``: each
    study's --*-benchmarks; the paper's by default), with a note for a study left without any."""
    chosen = {"main": selected}
    for study in PAPER_STUDY_BENCHMARKS:
        chosen[study] = study_benchmarks(requested[study], study, selected) if study in studies else []
        if study in studies and not chosen[study]:
            log(f"note: the {study} study runs on "
                f"{', '.join(split_names(requested[study]) or PAPER_STUDY_BENCHMARKS[study])}, "
                f"none of which is selected; pass --{study.replace('_', '-')}-benchmarks NAME[,NAME] or all")
    if chosen["backbone"]:
        chosen["backbone"] = backbone_benchmarks(config_dir, chosen["backbone"],
                                                 split_names(requested["backbone"]) == ["all"], methods, overrides, log)
    return chosen
