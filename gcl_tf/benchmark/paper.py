"""Reproduce the paper's tables and figures: ``python -m gcl_tf.benchmark paper --output DIR``.

Runs every (benchmark, method, seed) of the selected studies, each into its own folder
``DIR/runs/<benchmark>/<method-or-variant>/seed<k>/`` (see ``layout.py``), then redraws every
table and figure (``plots.redraw``). A run whose folder already holds its results.json is not
recomputed, so an interrupted suite resumes where it stopped; a finished run whose config
differs from the one planned now stops the suite with one line (use another --output).

Studies (``--studies``):
- ``main``: every method with a preset in ``configs/<benchmark>.yaml`` (or those of --methods),
  with the preset's settings: the paper's Tables 1 and 2, accuracy vs tasks, timing, t-SNE,
  context graph;
- ``ablation``: GCL with graph_lambda 0, then also one test graph sample, then also deterministic
  graphs (the paper's ablation table; the full model is the main GCL run; the one-sample column
  is the graph_lambda 0 run's second evaluation, not a run of its own), on the benchmarks of
  --ablation-benchmarks (default: the paper's, split_cifar10);
- ``memory``: ER and GCL at each memory size of --memory-sizes (default 100 250 500 1000), on the
  benchmarks of --memory-benchmarks (default: the paper's, split_svhn and split_cifar10). The run
  at a preset's own memory size is the main run;
- ``backbone`` (not in the paper, nor in the default studies): each method of the main study on
  each trunk of --backbones (default convnet, resnet18: ``layout.BACKBONES``), on the benchmarks
  of --backbone-benchmarks (default split_cifar10), folders ``<method>-<trunk>``. One rule for
  every method: its preset with only ``model.backbone`` and ``model.filters`` replaced, every
  other setting (optimizer, learning rate, memory, model.hidden_size, method keys) the preset's
  (``studies.py``). The run on the preset's own trunk is the main run. A benchmark whose presets
  use neither trunk (the MNIST ones: MLPs) is refused when named, left out (a note) by ``all``;
- ``graph_lambda`` (the paper's figure of λ_G; not in the default studies): GCL at each
  graph_lambda of --graph-lambdas (default 0 10 50 100 1000, the appendix's grid), on the
  benchmarks of --graph-lambda-benchmarks (default split_cifar10), folders
  ``gcl-graph_lambda<value>``; the preset's value is the main run and 0 the ablation's
  ``gcl-no_graph_reg`` run (one run serves both studies).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field

from gcl_tf.benchmark import layout, roles, selection
from gcl_tf.benchmark import studies as study_runs
from gcl_tf.benchmark.selection import DEFAULT_SEEDS, DEFAULT_STUDIES, PAPER_BENCHMARKS, PAPER_MEMORY_SIZES, STUDIES
from gcl_tf.benchmark.status import finished, resumable
from gcl_tf.errors import DataError, Stopped, UserError, exit_on_user_error
from gcl_tf.faults import exclusive
from gcl_tf.io import read_json, write_json_atomic
from gcl_tf.prechecks import output_folder


@dataclass
class Run:
    benchmark: str
    variant: str
    method: str
    seed: int
    study: str
    config_path: str
    overrides: list = field(default_factory=list)  # everything after the file: preset choice, --set, variant, seed
    config: object = None  # the resolved gcl_tf.config.Config


# ----------------------------------------------------------------------------- planning
def plan(config_dir: str = "configs", benchmarks=None, methods=None, seeds: int = DEFAULT_SEEDS,
         studies=DEFAULT_STUDIES, overrides=(), memory_sizes=PAPER_MEMORY_SIZES, ablation_benchmarks=None,
         memory_benchmarks=None, backbone_benchmarks=None, backbones=tuple(layout.BACKBONES),
         graph_lambdas=layout.PAPER_GRAPH_LAMBDAS, graph_lambda_benchmarks=None, log=print,
         memory_methods=None) -> list[Run]:
    """Every run of the suite, configs resolved and validated (a bad key stops here, before any
    training; nothing here loads TensorFlow); the same run twice (the memory study at the preset's
    size, the main run) once. ``memory_methods``: the memory study's (default: the paper's ER and
    GCL; studies.memory_methods)."""
    from gcl_tf import config as config_lib

    studies, selected, wanted_methods, sizes, trunks, lambdas = selection.selection(
        config_dir, benchmarks, methods, seeds, studies, memory_sizes, backbones, graph_lambdas)
    requested = {"ablation": ablation_benchmarks, "memory": memory_benchmarks, "backbone": backbone_benchmarks,
                 "graph_lambda": graph_lambda_benchmarks}
    study_benchmarks = selection.benchmarks_of_studies(config_dir, studies, selected, requested, wanted_methods,
                                                       overrides, log)
    runs, seen = [], {}
    for b in selected:
        path = os.path.join(config_dir, b + ".yaml")

        def preset_value(m, key):
            return study_runs.preset_value(path, [f"method.name={m}", *overrides], key)

        def trunk(m):
            model = config_lib.load_config(path, [f"method.name={m}", *overrides]).to_dict()["model"]
            return layout.trunk_of(model)

        planned = _benchmark_runs(b, path, studies, study_benchmarks, wanted_methods, sizes, trunks, lambdas,
                                  preset_value, trunk, selection.split_names(memory_methods), log)
        for study, variants in planned.items():
            for variant, method, variant_overrides in variants:
                for seed in range(seeds):
                    if (b, variant, seed) in seen:
                        continue
                    sets = [f"method.name={method}", *overrides, *variant_overrides, f"seed={seed}"]
                    config = config_lib.load_config(path, sets)
                    seen[(b, variant, seed)] = run = Run(b, variant, method, seed, study, path, sets, config)
                    runs.append(run)
    return runs


def _benchmark_runs(b, path, studies, study_benchmarks, wanted_methods, sizes, trunks, lambdas, preset_value, trunk,
                    memory_methods, log) -> dict:
    """``{study: [(variant, method, overrides)]}``: what each study runs on benchmark ``b``
    (``preset_value(method, key)``: a method key of the method's preset there; ``trunk(method)``:
    its trunk)."""
    presets = selection.preset_methods(path)
    main = [m for m in (wanted_methods or presets) if m in presets]
    missing = [m for m in wanted_methods if m not in presets]
    if missing and ("main" in studies or b in study_benchmarks["backbone"]):
        log(f"note: {b}: no preset for {', '.join(missing)} in {path} (skipped)")
    planned = {"main": [(m, m, []) for m in main] if "main" in studies else []}
    if b in study_benchmarks["ablation"]:
        planned["ablation"] = study_runs.ablation(path, presets)
    if b in study_benchmarks["memory"]:
        planned["memory"] = study_runs.memory(
            path, presets, sizes, lambda m: preset_value(m, "memory_size"), memory_methods)
    if b in study_benchmarks["backbone"]:
        planned["backbone"] = study_runs.backbone(main, trunks, trunk)
    if b in study_benchmarks["graph_lambda"]:
        planned["graph_lambda"] = study_runs.graph_lambda(path, presets, lambdas,
                                                          lambda: preset_value(roles.LEAD, "graph_lambda"))
    return planned


def check_data(runs) -> None:
    """Stop before training when a local data location is missing (one line naming the config)."""
    from gcl_tf.config import missing_data_path

    for run in runs:
        problem = missing_data_path(run.config.benchmark)
        if problem:
            raise DataError(f"{run.benchmark}: {problem}; set it in {run.config_path} or pass --set benchmark.path=...")


# ----------------------------------------------------------------------------- running
class _BenchmarkCache:
    """The last ContinualBenchmark built (runs are ordered so that consecutive ones share it)."""

    def __init__(self):
        self.key, self.value = None, None

    def get(self, config):
        from gcl_tf.data import ContinualBenchmark

        key = (json.dumps(config.to_dict()["benchmark"], sort_keys=True), config.seed, config.eval.split)
        if key != self.key:
            self.key, self.value = None, None  # free the previous one first
            self.value = ContinualBenchmark(config.benchmark, config.seed, load_test=config.eval.split == "test")
            self.key = key
        return self.value


def run_suite(runs, output: str, verbose=None, log=print) -> dict:
    """Train every unfinished run in order; returns counts {"trained", "skipped"}."""
    import keras

    from gcl_tf import train

    # Consecutive runs share their data: group by benchmark and seed, keeping the plan's order otherwise.
    order = {}
    for run in runs:
        order.setdefault((run.benchmark, run.seed), len(order))
    runs = sorted(runs, key=lambda r: order[(r.benchmark, r.seed)])
    cache = _BenchmarkCache()
    counts = {"trained": 0, "skipped": 0}
    start = time.perf_counter()
    total = len(runs)
    for i, run in enumerate(runs, 1):
        folder = layout.run_dir(output, run.benchmark, run.variant, run.seed)
        label = f"[{i}/{total}] {run.benchmark} {run.variant} seed {run.seed}"
        if finished(run, folder):
            counts["skipped"] += 1
            log(f"{label}: finished before, skipped")
            continue
        resume = resumable(run, folder)
        log(f"{label}: {'resuming' if resume else 'training'} ({run.study}) -> {folder}")
        run_start = time.perf_counter()
        keras.backend.clear_session()
        results = train.run(run.config, output_dir=folder, overwrite=False, verbose=verbose,
                            benchmark=cache.get(run.config), resume=resume)
        counts["trained"] += 1
        log(f"{label}: ACC {results['acc']:.2f} FGT {results['fgt']:.2f} in {time.perf_counter() - run_start:.0f} s "
            f"(suite {time.perf_counter() - start:.0f} s)")
    return counts


def record_invocation(output: str, argv) -> None:
    path = os.path.join(output, layout.SUITE)
    data = read_json(path) if os.path.isfile(path) else {"invocations": []}
    command = "python -m gcl_tf.benchmark paper " + " ".join(shlex.quote(a) for a in argv)
    data["invocations"].append({
        "command": command,
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    })
    write_json_atomic(path, data)


# ----------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gcl_tf.benchmark paper",
        description="Run the paper's experiments (resumable) and write its tables and figures into DIR.",
        epilog="Lists take commas or repeats: --benchmarks split_svhn,split_cifar10. "
               "Redraw without training: python -m gcl_tf.benchmark plots DIR.")
    parser.add_argument("--output", required=True, metavar="DIR", help="suite folder (runs/, tables/, figures/)")
    parser.add_argument("--benchmarks", nargs="+", metavar="NAME",
                        help=f"config stems under --config-dir (default: {','.join(PAPER_BENCHMARKS)})")
    parser.add_argument("--methods", nargs="+", metavar="NAME",
                        help="methods of the main study (default: every preset of each benchmark's config)")
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help=f"seeds 0..N-1 (default {DEFAULT_SEEDS})")
    parser.add_argument("--studies", nargs="+", metavar="STUDY", default=[",".join(DEFAULT_STUDIES)],
                        help=f"any of {', '.join(STUDIES)} (default: {','.join(DEFAULT_STUDIES)}, the paper's)")
    parser.add_argument("--ablation-benchmarks", nargs="+", metavar="NAME",
                        help="benchmarks of the ablation study, or all (default: split_cifar10, as the paper)")
    parser.add_argument("--memory-benchmarks", nargs="+", metavar="NAME",
                        help="benchmarks of the memory study, or all (default: split_svhn,split_cifar10, as the paper)")
    parser.add_argument("--memory-sizes", nargs="+", metavar="N", default=[",".join(map(str, PAPER_MEMORY_SIZES))],
                        help="memory sizes of the memory study (default: 100,250,500,1000)")
    parser.add_argument("--memory-methods", nargs="+", metavar="NAME",
                        help="methods of the memory study: any preset with a memory "
                             f"(default: {','.join(roles.MEMORY_METHODS)}, the paper's figure)")
    parser.add_argument("--backbone-benchmarks", nargs="+", metavar="NAME",
                        help="benchmarks of the backbone study, or all (default: split_cifar10)")
    parser.add_argument("--backbones", nargs="+", metavar="TRUNK", default=[",".join(layout.BACKBONES)],
                        help="trunks of the backbone study: each method's preset with only the trunk replaced "
                             f"(default: {','.join(layout.BACKBONES)})")
    parser.add_argument("--graph-lambda-benchmarks", nargs="+", metavar="NAME",
                        help="benchmarks of the graph_lambda study, or all (default: split_cifar10)")
    parser.add_argument("--graph-lambdas", nargs="+", metavar="L",
                        default=[",".join(f"{v:g}" for v in layout.PAPER_GRAPH_LAMBDAS)],
                        help="GCL's graph_lambda values of the graph_lambda study (default: "
                             f"{','.join(f'{v:g}' for v in layout.PAPER_GRAPH_LAMBDAS)}, the appendix's grid)")
    parser.add_argument("--config-dir", default="configs", help="folder of the benchmark configs (default: configs)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key in every run, e.g. --set eval.batch_size=1000 (repeatable)")
    parser.add_argument("--verbose", type=int, choices=(0, 1, 2),
                        help="Keras output of each run: 0 silent, 1 progress bar, 2 one line per task "
                             "(default: the config's train.verbose)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the runs and whether they are finished; train nothing")
    return parser


@exit_on_user_error
def main(argv=None) -> int:
    from gcl_tf.quiet import import_tensorflow

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    selection = (args.config_dir, args.benchmarks, args.methods, args.seeds, args.studies, args.overrides,
                 args.memory_sizes, args.ablation_benchmarks, args.memory_benchmarks, args.backbone_benchmarks,
                 args.backbones, args.graph_lambdas, args.graph_lambda_benchmarks)
    # The arguments, every config, the folder and the data: before TensorFlow loads; --dry-run
    # needs no more.
    runs = plan(*selection, log=print if args.dry_run else lambda text: None, memory_methods=args.memory_methods)
    if not runs:
        raise UserError("nothing to run: no selected benchmark has a preset for the selected methods and studies")
    if args.dry_run:
        from gcl_tf.benchmark.dry_run import dry_run

        print("\n".join(dry_run(runs, args.output, finished)))
        return 0
    output_folder(args.output)
    check_data(runs)
    import_tensorflow()  # quietly, before the methods' modules import it
    with exclusive(args.output):  # one suite at a time in DIR (each run also holds its own folder)
        record_invocation(args.output, argv)
        print(f"{len(runs)} run{'s' if len(runs) != 1 else ''} planned into {args.output}", flush=True)
        try:
            counts = run_suite(runs, args.output, verbose=args.verbose, log=lambda text: print(text, flush=True))
        except Stopped as stop:
            raise stop.with_hint("run the same command again to resume the suite") from None
        print(f"trained {counts['trained']}, skipped {counts['skipped']} finished before", flush=True)
        from gcl_tf.benchmark import plots

        plots.redraw(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
