"""The suite's plan: the command dispatcher, paper --dry-run (its totals, estimates and columns), each
method's colour and marker, and the backbone study's runs."""
from __future__ import annotations

import json
import os
import sys
import types

import pytest
from benchmark_harness import CIFAR, TRUNK_KEYS, forbid_training, one_line_error, without_trunk

from gcl_tf import machine

from conftest import REPO
from tiny_suite import BENCHMARK


def test_dispatcher_lists_every_command_and_dispatches_to_its_main(monkeypatch, capsys):
    import importlib.util

    import gcl_tf.benchmark.__main__ as dispatcher

    assert dispatcher.main([]) == 2
    assert "paper" in capsys.readouterr().err
    assert dispatcher.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in ("paper", "plots", "presets", "throughput", "gpu")), out
    assert all(importlib.util.find_spec(module) is not None for module, _ in dispatcher.COMMANDS.values())
    assert dispatcher.main(["speed"]) == 2 and "unknown command 'speed'" in capsys.readouterr().err

    # A command runs its module's main(argv) with the rest of the arguments.
    fake = types.ModuleType("gcl_tf.speed.throughput")
    fake.main = lambda argv=None: 7 if argv == ["--quick"] else 1
    monkeypatch.setitem(sys.modules, "gcl_tf.speed.throughput", fake)
    assert dispatcher.main(["throughput", "--quick"]) == 7


def test_dry_run_totals_notes_the_data_and_estimates_the_time_from_finished_runs(tmp_path, monkeypatch, capsys):
    """``paper --dry-run``: a line per run, the data each benchmark reads (and whether it is there),
    "N runs: K finished, M to run", and the time the rest should take from the finished runs'
    own times in the same folder (unknown without one). Nothing is trained."""
    from gcl_tf.benchmark import layout, paper
    from gcl_tf.io import write_json_atomic

    from tiny_suite import TINY_CONFIG, write_configs

    forbid_training(monkeypatch)
    config_dir = write_configs(str(tmp_path / "configs"))
    (tmp_path / "configs" / "tiny_idx.yaml").write_text(
        TINY_CONFIG.replace("dataset: digits, source: digits", f"dataset: fm, source: idx, path: {tmp_path / 'no'}"))
    output = str(tmp_path / "suite")
    args = ["--config-dir", config_dir, "--benchmarks", f"{BENCHMARK},tiny_idx", "--methods", "finetune,gcl",
            "--seeds", "2", "--studies", "main", "--output", output, "--dry-run"]

    assert paper.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert len([line for line in out if line.endswith("main     to run")]) == 8  # a line per run
    assert f"data: {BENCHMARK}: scikit-learn's bundled digits (nothing to download)" in out
    assert f"data: tiny_idx: idx {tmp_path / 'no'} (MISSING: set benchmark.path in " \
           f"{os.path.join(config_dir, 'tiny_idx.yaml')} or --set)" in out
    assert "8 runs: 0 finished, 8 to run" in out
    assert f"time to run: unknown (no finished run of the same benchmark and method in {output} to estimate from)" \
        in out

    # Finished runs (their results.json, as a run writes it): seed 0 of both methods on tiny_digits.
    runs = paper.plan(config_dir, [f"{BENCHMARK},tiny_idx"], ["finetune,gcl"], 2, ["main"])
    for run in runs:
        if run.benchmark == BENCHMARK and run.seed == 0:
            seconds = {"finetune": (10.0, 2.0), "gcl": (30.0, 6.0)}[run.method]
            write_json_atomic(os.path.join(layout.run_dir(output, run.benchmark, run.variant, 0), "results.json"),
                              {"config": run.config.to_dict(), "train_seconds": seconds[0],
                               "eval_seconds": seconds[1]})
    assert paper.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert "8 runs: 2 finished, 6 to run" in out
    assert (f"time to run: about 48 s for 2 of the 6 runs (from 2 finished runs in {output}); unknown for the "
            "other 4 (no finished run of their benchmark and method)") in out  # 12 s + 36 s for the seed 1 runs

    assert paper.main(args[:3] + [BENCHMARK] + args[4:]) == 0  # tiny_digits only: every run estimated
    out = capsys.readouterr().out.splitlines()
    assert "4 runs: 2 finished, 2 to run" in out
    assert any(line.startswith("time to run: about 48 s (each run as long as the finished ones") for line in out)

    # A stopped run: its checkpoint of step 25 (of the finished runs' 100) is resumed, and only
    # the steps it has left count: finetune seed 1 takes 9 s instead of 12.
    for run in runs:
        if run.benchmark == BENCHMARK and run.seed == 0:
            path = os.path.join(layout.run_dir(output, run.benchmark, run.variant, 0), "results.json")
            write_json_atomic(path, {**json.loads(open(path).read()), "train_steps": 100})
        if run.benchmark == BENCHMARK and run.seed == 1 and run.method == "finetune":
            stopped = os.path.join(layout.run_dir(output, run.benchmark, run.variant, 1), "checkpoints")
            os.makedirs(stopped)
            open(os.path.join(stopped, "ckpt-25.index"), "w").close()
    assert paper.main(args[:3] + [BENCHMARK] + args[4:]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len([line for line in out if line.endswith("main     to resume from step 25")]) == 1
    assert "4 runs: 2 finished, 2 to run (1 of them from a checkpoint)" in out
    assert any(line.startswith("time to run: about 45 s (each run as long as the finished ones") for line in out)


def test_dry_run_estimates_a_study_from_the_methods_finished_runs_it_does_not_select(tmp_path, monkeypatch, capsys):
    """A study asked for on its own (``--studies graph_lambda``) is estimated from the method's runs
    already finished in the folder though the command does not select them (the main GCL run):
    it said "unknown" while an hour-long GCL run's own time sat beside it."""
    from gcl_tf.benchmark import layout, paper
    from gcl_tf.io import write_json_atomic

    from tiny_suite import write_configs

    forbid_training(monkeypatch)
    config_dir = write_configs(str(tmp_path / "configs"))
    output = str(tmp_path / "suite")
    (main_run,) = paper.plan(config_dir, [BENCHMARK], ["gcl"], 1, ["main"])
    write_json_atomic(os.path.join(layout.run_dir(output, BENCHMARK, main_run.variant, 0), "results.json"),
                      {"method": "gcl", "config": main_run.config.to_dict(), "train_seconds": 50.0,
                       "eval_seconds": 10.0, "train_steps": 12})
    args = ["--config-dir", config_dir, "--benchmarks", BENCHMARK, "--methods", "gcl", "--seeds", "1",
            "--studies", "graph_lambda", "--graph-lambda-benchmarks", "all", "--graph-lambdas", "5,500",
            "--output", output, "--dry-run"]
    assert paper.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert "2 runs: 0 finished, 2 to run" in out  # the main run is not among them
    assert (f"time to run: about 2 min (each run as long as the finished ones of its benchmark and variant, else "
            f"method: 1 finished run in {output})") in out
    assert any(line.startswith("note: the estimate reads 1 run on an unrecorded machine;") for line in out)

    # A run as gcl_tf.train now writes it records its machine: this one's, so no note.
    path = os.path.join(layout.run_dir(output, BENCHMARK, main_run.variant, 0), "results.json")
    write_json_atomic(path, {**json.loads(open(path).read()), "machine": machine.describe()})
    assert paper.main(args) == 0
    assert not any(line.startswith("note:") for line in capsys.readouterr().out.splitlines())


@pytest.mark.parametrize("extra", [0, 3, 20])
def test_every_method_has_its_own_colour_and_marker_in_the_figures(extra):
    """Every method of the registry (and any number of new ones) gets a colour and a marker of
    its own (EWC and DER++ were drawn alike: DER++ fell back to the colour cycle's index), the
    accuracy figure draws them so, and the same method keeps its style whatever else is drawn."""
    from matplotlib.colors import to_rgba

    from gcl_tf import methods
    from gcl_tf.benchmark import plots
    from gcl_tf.benchmark import styles as style_lib
    from gcl_tf.benchmark.layout import RunResult

    names = list(methods.REGISTRY) + [f"new_method{i}" for i in range(extra)]
    matrix = [[90.0, 10.0], [80.0, 85.0]]
    runs = [RunResult("b", name, 0, "", {"accuracy_matrix": matrix}) for name in names]
    lines = plots.accuracy_tasks_figure(runs, "b").axes[0].get_lines()
    assert len(lines) == len(names)
    assert len({to_rgba(line.get_color()) for line in lines}) == len(names)
    assert len({str(line.get_marker()) for line in lines}) == len(names)
    drawn = style_lib.method_styles(names)
    assert sorted(drawn) == sorted(names)
    assert len({to_rgba(colour) for colour, _ in drawn.values()}) == len(names)
    assert len({str(shape) for _, shape in drawn.values()}) == len(names)
    two = plots.accuracy_tasks_figure([run for run in runs if run.variant in ("ewc", "derpp")], "b", drawn)
    assert {to_rgba(line.get_color()) for line in two.axes[0].get_lines()} == \
        {to_rgba(drawn["ewc"][0]), to_rgba(drawn["derpp"][0])}


def test_a_method_is_drawn_alike_in_every_suite():
    """Every registered method has a fixed colour and marker (its class's ``style``): GCL is drawn
    the same whatever else a suite holds (few methods, the CIFAR suite's many study variants, a
    method outside the registry), in the accuracy and timing figures (and the memory one: same styles)."""
    from matplotlib.colors import to_rgba

    from gcl_tf import methods
    from gcl_tf.benchmark import plots
    from gcl_tf.benchmark import styles as style_lib
    from gcl_tf.benchmark.layout import RunResult

    registered = style_lib.registered_styles()
    assert set(registered) == set(methods.REGISTRY)
    assert len({to_rgba(c) for c, _ in registered.values()}) == len(registered)
    assert len({m for _, m in registered.values()}) == len(registered)
    cifar = set(methods.REGISTRY) | {f"{m}-memory{k}" for m in ("er", "gcl") for k in (100, 500, 1000)} | {
        f"{m}-{t}" for m in methods.REGISTRY for t in ("convnet", "resnet18")} | {
        "gcl-no_graph_reg", "gcl-no_graph_reg-one_sample-deterministic"}
    suites = [["gcl"], ["finetune", "er", "gcl"], sorted(cifar), ["gcl", "someone_elses_method"]]
    for names in suites:
        drawn = style_lib.method_styles(names)
        assert drawn["gcl"] == registered["gcl"] == methods.method_class("gcl").style == ("#d62728", "*"), names
        assert all(drawn[m] == registered[m] for m in names if m in methods.REGISTRY)
        assert len({to_rgba(c) for c, _ in drawn.values()}) == len(drawn) == len(set(names))

    def drawn_gcl(names):
        matrix = [[90.0, 10.0], [80.0, 85.0]]
        runs = [RunResult("b", name, 0, "", {"accuracy_matrix": matrix}) for name in names]
        drawn = style_lib.method_styles(names)
        line = [line for line in plots.accuracy_tasks_figure(runs, "b", drawn).axes[0].get_lines()
                if line.get_label().startswith("GCL")][0]
        timing = {("b", m): {"train_ms": (1.0, 0.1, 2), "test_ms": (1.0, 0.1, 2)} for m in names}
        bars = plots.timing_figure(timing, "b", drawn).axes[0].patches
        methods_drawn = sorted(names, key=plots.method_sort_key)
        return to_rgba(line.get_color()), line.get_marker(), bars[methods_drawn.index("gcl")].get_facecolor()

    red = to_rgba("#d62728")
    assert drawn_gcl(["gcl"]) == drawn_gcl(sorted(methods.REGISTRY)) == drawn_gcl(["er", "gcl", "x"]) == \
        (red, "*", red)


def test_backbone_study_runs_each_preset_on_each_trunk_with_only_the_trunk_replaced():
    """Split CIFAR10's presets: GCL on the ConvNet, the baselines on the ResNet-18. The study adds
    each method on the other trunk (``<method>-<trunk>``), its preset otherwise unchanged (optimizer,
    learning rate, memory, model.hidden_size, method keys), and the run on the preset's own trunk
    is the main run, planned once, whether or not the main study is selected."""
    from gcl_tf.benchmark import paper

    runs = paper.plan(CIFAR, ["split_cifar10"], ["gcl,er,derpp"], 2, ["main,backbone"], log=lambda text: None)
    by_key = {(r.variant, r.seed): r for r in runs}
    assert len(by_key) == len(runs) == 12
    assert {v for v, _ in by_key} == {"gcl", "er", "derpp", "gcl-resnet18", "er-convnet", "derpp-convnet"}
    for variant, method, trunk in (("gcl-resnet18", "gcl", "resnet18"), ("er-convnet", "er", "convnet"),
                                   ("derpp-convnet", "derpp", "convnet")):
        for seed in range(2):
            run, main = by_key[(variant, seed)], by_key[(method, seed)]
            assert run.method == method and run.study == "backbone" and main.study == "main"
            assert run.overrides == [f"method.name={method}", f"model.backbone={trunk}",
                                     f"model.filters={TRUNK_KEYS[trunk]['filters']}", f"seed={seed}"]
            config, preset = run.config.to_dict(), main.config.to_dict()
            assert {k: config["model"][k] for k in ("backbone", "filters")} == TRUNK_KEYS[trunk]
            assert without_trunk(config) == without_trunk(preset)  # optimizer, lr, memory, hidden_size, method
    assert by_key[("gcl-resnet18", 0)].config.model.hidden_size == 256  # GCL's own H
    assert by_key[("gcl-resnet18", 0)].config.train.optimizer == "adam"
    assert by_key[("derpp-convnet", 1)].config.train.learning_rate == 0.03  # DER++'s own SGD 0.03
    # Without the main study the runs on the presets' own trunks are still planned, once, as "<method>".
    runs = paper.plan(CIFAR, ["split_cifar10"], ["gcl,er"], 1, ["backbone"], backbones=["convnet"],
                      log=lambda text: None)
    assert [(r.variant, r.study) for r in runs] == [("gcl", "backbone"), ("er-convnet", "backbone")]


def test_default_studies_are_unchanged_and_plan_no_backbone_run(monkeypatch):
    """The backbone study is extra to the paper: the default --studies plan the runs they did."""
    from gcl_tf.benchmark import paper

    monkeypatch.chdir(REPO)
    assert paper.build_parser().parse_args(["--output", "x"]).studies == ["main,ablation,memory"]
    runs = paper.plan(benchmarks=["split_cifar10"], seeds=1, log=lambda text: None)
    assert not any(r.variant.endswith(("-convnet", "-resnet18")) for r in runs)
    assert {r.study for r in runs} == {"main", "ablation", "memory"}
    assert len(runs) == 8 + 2 + 6  # every preset; the ablation's 2 runs; ER and GCL at 100, 500, 1000


def test_backbone_study_on_a_benchmark_it_does_not_select_says_so():
    from gcl_tf.benchmark import paper

    notes = []
    runs = paper.plan(CIFAR, ["split_svhn"], ["er"], 1, ["backbone"], log=notes.append)
    assert runs == [] and len(notes) == 1
    assert "backbone study runs on split_cifar10" in notes[0] and "--backbone-benchmarks" in notes[0]
    runs = paper.plan(CIFAR, ["split_svhn"], ["er"], 1, ["backbone"], backbone_benchmarks=["all"],
                      log=notes.append)
    assert sorted(r.variant for r in runs) == ["er", "er-convnet"]


def test_backbone_trunks_are_the_backbones_defaults():
    """trunk_of reads ``filters: null`` as the table's filters: they must be the builders' defaults."""
    import inspect

    from gcl_tf import backbones
    from gcl_tf.benchmark import layout

    for name, (_, keys) in layout.BACKBONES.items():
        assert keys == TRUNK_KEYS[name]
        assert inspect.signature(getattr(backbones, name)).parameters["filters"].default == keys["filters"]
        assert layout.trunk_of({"backbone": name, "filters": None}) == name
        assert layout.trunk_of({"backbone": name, "filters": keys["filters"] + 1}) is None
    assert layout.trunk_of({"backbone": "mlp", "filters": None}) is None


def test_dry_run_judges_a_finished_run_by_every_key_as_the_suite_does(tmp_path, monkeypatch, capsys):
    """A finished run is the planned one only if every key of its config is the plan's, those the
    config leaves to the method's defaults too: a run that differs in ER's ``replay_batch_size``
    (which quickstart's preset does not state) stops --dry-run with the suite's own line."""
    from gcl_tf.benchmark import layout, paper
    from gcl_tf.io import write_json_atomic

    monkeypatch.chdir(REPO)
    forbid_training(monkeypatch)
    output = str(tmp_path / "suite")
    args = ["--benchmarks", "quickstart", "--methods", "er", "--seeds", "1", "--studies", "main", "--output", output,
            "--dry-run"]
    (run,) = paper.plan(benchmarks=["quickstart"], methods=["er"], seeds=1, studies=["main"], log=lambda text: None)
    results = os.path.join(layout.run_dir(output, run.benchmark, run.variant, 0), "results.json")
    saved = run.config.to_dict()
    write_json_atomic(results, {"config": saved})
    assert paper.main(args) == 0
    assert "1 run: 1 finished, 0 to run" in capsys.readouterr().out.splitlines()
    saved["method"]["replay_batch_size"] = 5
    write_json_atomic(results, {"config": saved})
    line = one_line_error(capsys, lambda: paper.main(args))
    assert f"{os.path.dirname(results)} holds a finished run with another config (method.replay_batch_size" in line


def test_dry_run_lists_the_backbone_runs(monkeypatch, capsys):
    from gcl_tf.benchmark import paper

    forbid_training(monkeypatch)
    monkeypatch.chdir(REPO)
    assert paper.main(["--benchmarks", "split_cifar10", "--methods", "gcl,er", "--seeds", "2", "--studies",
                       "main,backbone", "--output", "/nonexistent/suite", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    listed = [line.split() for line in out if line.startswith("split_cifar10 ")]
    assert [(v, s, study) for _, v, _, s, study, *_ in listed] == [
        ("gcl", "0", "main"), ("gcl", "1", "main"), ("er", "0", "main"), ("er", "1", "main"),
        ("gcl-resnet18", "0", "backbone"), ("gcl-resnet18", "1", "backbone"),
        ("er-convnet", "0", "backbone"), ("er-convnet", "1", "backbone")]
    assert "8 runs: 0 finished, 8 to run" in out


def test_dry_run_columns_line_up_with_a_long_study_name(monkeypatch, capsys):
    from gcl_tf.benchmark import paper

    forbid_training(monkeypatch)
    monkeypatch.chdir(REPO)
    assert paper.main(["--benchmarks", "split_cifar10", "--methods", "gcl", "--seeds", "1", "--studies",
                       "main,graph_lambda", "--graph-lambdas", "0,5", "--output", "/nonexistent/suite",
                       "--dry-run"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("split_cifar10 ")]
    assert {line.split()[4] for line in listed} == {"main", "graph_lambda"}
    assert len({line.index("to run") for line in listed}) == 1, listed  # one column, whatever the study

