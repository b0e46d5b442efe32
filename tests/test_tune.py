"""Hyper-parameter search (gcl_tf.tune) on tiny permuted digits streams: the grid, resuming,
the distributed mode (a chief and two workers), and that the test split is never read."""
from __future__ import annotations

import collections
import contextlib
import glob
import io
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from conftest import REPO

# 2 permuted tasks x 150 digits (15 held out per task for validation), ER with a tiny MLP.
TINY = {
    "seed": 0,
    "output_dir": "unused",
    "benchmark": {"name": "permuted", "dataset": "digits", "source": "digits",
                  "num_tasks": 2, "samples_per_task": 150},
    "method": {"name": "er", "memory_size": 50},
    "model": {"backbone": "mlp", "hidden_size": 32},
    "train": {"batch_size": 10, "learning_rate": 0.1, "verbose": 0, "log_every": 0},
    "eval": {"batch_size": 128},
    "tune": {"space": {"train.learning_rate": [0.01, 0.1], "train.optimizer": ["sgd", "adam"]}},
}
GRID = {(lr, opt) for lr in (0.01, 0.1) for opt in ("sgd", "adam")}


@pytest.fixture(autouse=True)
def single_process(monkeypatch):
    """In-process searches run alone, whatever the environment says."""
    for name in ("KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT"):
        monkeypatch.delenv(name, raising=False)


def write_config(folder, raw=TINY) -> str:
    path = os.path.join(str(folder), "tiny.yaml")
    with open(path, "w") as handle:
        yaml.safe_dump(raw, handle, sort_keys=False)
    return path


def trial_results(folder) -> dict:
    """trial id -> the trial's own results.json."""
    out = {}
    for path in glob.glob(os.path.join(str(folder), "trial_*", "results.json")):
        trial_id = os.path.basename(os.path.dirname(path))[len("trial_"):]
        with open(path) as handle:
            out[trial_id] = json.load(handle)
    return out


def grid_point(results) -> tuple:
    return (results["config"]["train"]["learning_rate"], results["config"]["train"]["optimizer"])


def event_tags(folder, recursive=False) -> set:
    import tensorflow as tf

    pattern = os.path.join(str(folder), "**" if recursive else "", "events.out.tfevents.*")
    tags = set()
    for path in glob.glob(pattern, recursive=recursive):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    return tags


class CountingTrain:
    """Wraps gcl_tf.train.run: records the folder of every run; ``interrupt_at`` (1-based)
    raises KeyboardInterrupt at the start of that run, like Ctrl-C."""

    def __init__(self, monkeypatch, interrupt_at=None):
        from gcl_tf import train

        self.real = train.run
        self.calls = []
        self.interrupt_at = interrupt_at
        monkeypatch.setattr(train, "run", self)

    def __call__(self, config, output_dir=None, *args, **kwargs):
        self.calls.append(os.path.basename(output_dir))
        if self.interrupt_at == len(self.calls):
            raise KeyboardInterrupt
        return self.real(config, output_dir, *args, **kwargs)


# ----------------------------------------------------------------------------- one grid search
@pytest.fixture(scope="module")
def grid_search(tmp_path_factory):
    """A 4-trial grid searched in this process while every source refuses to load its test split."""
    from gcl_tf import tune
    from gcl_tf.data import sources

    folder = tmp_path_factory.mktemp("grid") / "search"
    loads = []
    real_load = sources.Source.load

    def guarded_load(self, split):
        loads.append(split)
        if split == "test":
            raise AssertionError("the test split was read during a search")
        return real_load(self, split)

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        for name in ("KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT"):
            mp.delenv(name, raising=False)
        mp.setattr(sources.Source, "load", guarded_load)
        with contextlib.redirect_stdout(out):
            summary = tune.search(raw=TINY, output_dir=str(folder))
    return {"folder": folder, "summary": summary, "loads": loads, "stdout": out.getvalue()}


@pytest.mark.slow
def test_grid_search_runs_every_trial_and_picks_the_best_validation_acc(grid_search):
    folder, summary = grid_search["folder"], grid_search["summary"]
    results = trial_results(folder)
    assert len(results) == 4
    assert {grid_point(r) for r in results.values()} == GRID  # every combination, once
    assert all(r["eval_split"] == "validation" for r in results.values())
    assert all(r["config"]["benchmark"]["validation_fraction"] == pytest.approx(0.1) for r in results.values())

    accs = {trial_id: r["acc"] for trial_id, r in results.items()}
    best_acc = max(accs.values())
    assert len(set(accs.values())) > 1  # the grid points differ, so picking one means something
    assert summary["val_acc"] == pytest.approx(best_acc)
    assert accs[summary["trial_id"]] == pytest.approx(best_acc)  # the best trial by its own results file
    best_run = results[summary["trial_id"]]
    assert summary["values"] == {"train.learning_rate": best_run["config"]["train"]["learning_rate"],
                                 "train.optimizer": best_run["config"]["train"]["optimizer"]}
    with open(folder / "best.json") as handle:
        assert json.load(handle)["trial_id"] == summary["trial_id"]

    # Progress: a line per trial with its values and objective; the best printed at the end.
    stdout = grid_search["stdout"]
    for trial_id, r in results.items():
        lr, opt = grid_point(r)
        line = f"trial {trial_id}: train.learning_rate={lr:g}  train.optimizer={opt} -> validation ACC {r['acc']:.2f}"
        assert line in stdout, stdout
    assert f"Best: trial {summary['trial_id']}, validation ACC {best_acc:.2f}" in stdout

    # TensorBoard HParams: the experiment at the top, each trial's values and score in its run.
    assert "_hparams_/experiment" in event_tags(folder)
    for trial_id in results:
        tags = event_tags(folder / f"trial_{trial_id}" / "tensorboard")
        assert {"_hparams_/session_start_info", "tune/val_acc", "accuracy/average_tasks_seen"} <= tags


@pytest.mark.slow
def test_search_never_reads_the_test_split_and_best_config_evaluates_on_test(grid_search, tmp_path):
    from gcl_tf import train
    from gcl_tf.config import load_config
    from gcl_tf.data import sources

    loads = grid_search["loads"]
    assert "train" in loads and "test" not in loads

    path = grid_search["folder"] / "best_config.yaml"
    config = load_config(str(path))
    values = grid_search["summary"]["values"]
    assert config.eval.split == "test"
    assert config.benchmark.validation_fraction == 0.0  # the user's own setting, not the search's
    assert (config.train.learning_rate, config.train.optimizer) == (values["train.learning_rate"],
                                                                   values["train.optimizer"])
    assert (config.method.name, config.method.memory_size, config.benchmark.num_tasks) == ("er", 50, 2)
    assert "tune" not in yaml.safe_load(path.read_text())  # a plain training config

    # A config that already evaluates on its own validation split: searched as is, best on test.
    from gcl_tf.tune import Search

    own = Search(dict(TINY, eval={"split": "validation"}), ["benchmark.validation_fraction=0.2"])
    assert not own.added_validation and own.trial_config({}).benchmark.validation_fraction == pytest.approx(0.2)
    best = own.best_config(values)
    assert best.eval.split == "test" and best.benchmark.validation_fraction == pytest.approx(0.2)

    # Trained as written, it reads the test split and reports test accuracy.
    read = []
    real_load = sources.Source.load

    def recording_load(self, split):
        read.append(split)
        return real_load(self, split)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sources.Source, "load", recording_load)
        results = train.run(config, output_dir=str(tmp_path / "best"), verbose=0)
    assert "test" in read and results["eval_split"] == "test"


# ----------------------------------------------------------------------------- resuming
@pytest.mark.slow
def test_an_interrupted_search_resumes_without_redoing_finished_trials(tmp_path, monkeypatch):
    from gcl_tf import tune

    folder = tmp_path / "search"

    counter = CountingTrain(monkeypatch)
    tune.search(raw=TINY, output_dir=str(folder), max_trials=2)
    assert counter.calls == ["trial_0", "trial_1"]
    stamps = {t: os.stat(folder / f"trial_{t}" / "results.json").st_mtime_ns for t in ("0", "1")}

    # The whole grid, in the same folder: Ctrl-C in the middle of its second new trial.
    counter = CountingTrain(monkeypatch, interrupt_at=2)
    with pytest.raises(KeyboardInterrupt):
        tune.search(raw=TINY, output_dir=str(folder))
    assert counter.calls == ["trial_2", "trial_3"]
    stamps["2"] = os.stat(folder / "trial_2" / "results.json").st_mtime_ns
    assert not (folder / "trial_3" / "results.json").exists()

    # Again: only the interrupted trial runs.
    counter = CountingTrain(monkeypatch)
    summary = tune.search(raw=TINY, output_dir=str(folder))
    assert counter.calls == ["trial_3"]
    for trial_id, stamp in stamps.items():
        assert os.stat(folder / f"trial_{trial_id}" / "results.json").st_mtime_ns == stamp
    results = trial_results(folder)
    assert sorted(results) == ["0", "1", "2", "3"]
    assert {grid_point(r) for r in results.values()} == GRID
    assert summary["trials_finished"] == 4
    assert summary["val_acc"] == pytest.approx(max(r["acc"] for r in results.values()))

    # A finished search run again trains nothing and reports the same best trial.
    counter = CountingTrain(monkeypatch)
    again = tune.search(raw=TINY, output_dir=str(folder))
    assert counter.calls == [] and again["trial_id"] == summary["trial_id"]


@pytest.mark.slow
def test_a_reloaded_oracle_does_not_hand_out_a_trial_that_had_ended(tmp_path, monkeypatch, capsys):
    """A distributed chief's last save lists the trial that ended last as still ongoing (KerasTuner
    saves inside end_trial, before the trial leaves ongoing_trials): resuming must not run it again."""
    from gcl_tf import tune

    folder = tmp_path / "search"
    tune.search(raw=TINY, output_dir=str(folder), max_trials=2)
    with open(folder / "oracle.json") as handle:
        state = json.load(handle)
    state["ongoing_trials"] = {"tuner1": "1"}  # as the chief leaves it
    with open(folder / "oracle.json", "w") as handle:
        json.dump(state, handle)
    capsys.readouterr()

    counter = CountingTrain(monkeypatch)
    summary = tune.search(raw=TINY, output_dir=str(folder))
    started = re.findall(r"trial (\d+) started", capsys.readouterr().out)
    assert started == ["2", "3"] and counter.calls == ["trial_2", "trial_3"]
    assert summary["trials_finished"] == 4


# ----------------------------------------------------------------------------- distributed
def assert_the_whole_grid_ran_and_the_best_is_reported(folder):
    """Every grid point ran once and ended; best.json names the trial with the best validation ACC."""
    results = trial_results(folder)
    assert sorted(results) == ["0", "1", "2", "3"]
    assert {grid_point(r) for r in results.values()} == GRID
    for trial_json in glob.glob(str(folder / "trial_*" / "trial.json")):
        with open(trial_json) as handle:
            assert json.load(handle)["status"] == "COMPLETED"
    with open(folder / "best.json") as handle:
        best = json.load(handle)
    assert best["val_acc"] == pytest.approx(max(r["acc"] for r in results.values()))
    assert results[best["trial_id"]]["acc"] == pytest.approx(best["val_acc"])


@pytest.mark.slow
def test_distributed_search_with_a_chief_and_two_workers_runs_each_trial_once(tmp_path):
    config = write_config(tmp_path)
    folder = tmp_path / "search"
    from gcl_tf.tune.local import free_port

    port = free_port()
    command = [sys.executable, "-m", "gcl_tf.tune", "--config", config, "--output", str(folder)]

    def start(tuner_id):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERASTUNER_TUNER_ID=tuner_id,
                   KERASTUNER_ORACLE_IP="127.0.0.1", KERASTUNER_ORACLE_PORT=str(port))
        return subprocess.Popen(command, cwd=REPO, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    # Workers first: they wait for the chief, so both are asking when trials are handed out.
    processes = {name: start(name) for name in ("tuner0", "tuner1", "chief")}
    outputs = {}
    try:
        for name, process in processes.items():
            outputs[name] = process.communicate(timeout=420)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
    for name, process in processes.items():
        assert process.returncode == 0, f"{name}:\n{outputs[name][0][-2000:]}\n{outputs[name][1][-3000:]}"

    # Every trial started exactly once, across the two workers; each worker ran some.
    started = {name: re.findall(rf"^\[{name}\] trial (\d+) started", outputs[name][0], re.M)
               for name in ("tuner0", "tuner1")}
    counts = collections.Counter(started["tuner0"] + started["tuner1"])
    assert counts == {"0": 1, "1": 1, "2": 1, "3": 1}, started
    assert started["tuner0"] and started["tuner1"], started

    # The chief reports the best trial and writes the config; the workers do not.
    assert_the_whole_grid_ran_and_the_best_is_reported(folder)
    assert "Best: trial" in outputs["chief"][0] and (folder / "best_config.yaml").exists()
    assert "Best: trial" not in outputs["tuner0"][0] + outputs["tuner1"][0]


# ----------------------------------------------------------------------------- the space
def test_every_method_has_a_default_grid_on_its_own_config_keys():
    """The paper's grids, declared by the method classes (tune_grid) on top of the common
    optimizer and learning-rate grid; a method that declares none gets the common grid."""
    from gcl_tf import methods
    from gcl_tf.config import resolve
    from gcl_tf.tune import COMMON_GRID, default_grid, search_space

    for name in methods.names():
        config = resolve({"method": {"name": name}})
        space = search_space(config, default_grid(name), "grid", where=f"default grid of {name}")
        assert space["train.learning_rate"] == [0.0002, 0.001, 0.01, 0.1, 0.3, 1.0]
    gcl = search_space(resolve({"method": {"name": "gcl"}}), default_grid("gcl"))
    assert list(gcl) == ["train.optimizer", "train.learning_rate", "method.graph_lambda",
                         "method.context_temperature", "method.target_temperature"]
    assert gcl["method.graph_lambda"] == [0.0, 10.0, 50.0, 100.0, 1000.0, 5000.0]
    assert default_grid("ewc")["method.ewc_lambda"] == [0.1, 1.0, 10.0, 100.0, 1000.0]
    assert default_grid("gem")["method.margin"] == [0.0, 0.1, 0.5, 1.0]
    assert default_grid("mer") == {"train.optimizer": ["sgd"],  # the class's key replaces the common one
                                   "train.learning_rate": COMMON_GRID["train.learning_rate"],
                                   "method.beta": [0.01, 0.03, 0.1, 0.3, 1.0]}
    assert default_grid("er_ace") == default_grid("agem") == COMMON_GRID  # nothing declared
    assert set(default_grid("derpp")) == {"train.optimizer", "train.learning_rate", "method.alpha", "method.beta"}
    default_grid("ewc")["method.ewc_lambda"].append(5.0)  # a copy: the class's grid is untouched
    assert methods.method_class("ewc").tune_grid["method.ewc_lambda"][-1] == 1000.0


def test_the_default_space_is_the_methods_default_grid():
    from gcl_tf.tune import Search

    raw = {k: v for k, v in TINY.items() if k != "tune"}
    search = Search(raw, ["method.name=gem"])
    assert search.default_space and search.tuner == "grid"
    assert search.space == {"train.optimizer": ["adam", "sgd"],
                            "train.learning_rate": [0.0002, 0.001, 0.01, 0.1, 0.3, 1.0],
                            "method.margin": [0.0, 0.1, 0.5, 1.0]}
    assert search.max_trials == 2 * 6 * 4  # the whole grid
    assert Search(raw, tuner="random").max_trials == 10
    # Values given as the config's types (the grid's integers are floats for float keys).
    space = "tune.space={train.learning_rate: {min: 1e-4, max: 1, log: true}, method.memory_size: [10, 20]}"
    ranged = Search(raw, [space], tuner="bayesian", max_trials=3)
    assert ranged.space == {"train.learning_rate": {"min": 0.0001, "max": 1.0, "log": True, "step": None},
                            "method.memory_size": [10, 20]}
    assert ranged.max_trials == 3
    trial = ranged.trial_config({"train.learning_rate": 0.003, "method.memory_size": 20})
    assert trial.eval.split == "validation" and trial.benchmark.validation_fraction == pytest.approx(0.1)
    assert trial.train.learning_rate == pytest.approx(0.003) and trial.method.memory_size == 20


@pytest.mark.parametrize("space, tuner, expected", [
    ({"train.learnin_rate": [0.1]}, "grid", ["tune.space: unknown key 'train.learnin_rate'; did you mean "
                                             "'train.learning_rate'?"]),
    ({"method.margin": [0.5]}, "grid", ["unknown key 'method.margin'", "allowed: method.memory_size"]),
    ({"optimizer": ["sgd"]}, "grid", ["unknown key 'optimizer'", "train.<key>"]),
    ({"method.name": ["er", "gcl"]}, "grid", ["'method.name' cannot be searched"]),
    ({"eval.split": ["test"]}, "grid", ["'eval.split' cannot be searched"]),
    ({"train.optimizer": ["sgd", "rmsprop"]}, "grid", ["tune.space.train.optimizer[1]", "allowed: sgd, adam"]),
    ({"train.learning_rate": [0.1, -1]}, "grid", ["train.learning_rate[1]", "out of range"]),
    ({"train.learning_rate": []}, "grid", ["train.learning_rate", "empty"]),
    ({"train.learning_rate": [0.1, 0.1]}, "grid", ["listed twice"]),
    ({"train.learning_rate": {"min": 0.001, "max": 1}}, "grid", ["needs the random or bayesian tuner"]),
    ({"train.learning_rate": {"min": 1, "max": 0.1}}, "random", ["min 1.0 is not below max 0.1"]),
    ({"train.learning_rate": {"min": 0.1}}, "random", ["needs 'max'"]),
    ({"train.learning_rate": {"min": 0.1, "max": 1, "scale": 2}}, "random", ["unknown range key 'scale'"]),
    ({"train.optimizer": {"min": 0, "max": 1}}, "random", ["a range needs a numeric key"]),
    ({"train.learning_rate": 0.1}, "grid", ["expected a list of values or a range"]),
    ({}, "grid", ["tune.space: expected a non-empty mapping"]),
])
def test_space_errors_are_one_line(space, tuner, expected):
    from gcl_tf.errors import ConfigError
    from gcl_tf.tune import Search

    raw = dict(TINY, tune={"space": space, "tuner": tuner})
    with pytest.raises(ConfigError) as info:
        Search(raw)
    message = str(info.value)
    assert "\n" not in message
    for part in expected:
        assert part in message, message


def cli_error(capsys, argv) -> str:
    from gcl_tf import tune

    with pytest.raises(SystemExit) as info:
        tune.main(argv)
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    return lines


def test_cli_errors_end_with_one_line_and_exit_2(tmp_path, capsys):
    config = write_config(tmp_path)
    out = str(tmp_path / "search")

    lines = cli_error(capsys, ["--config", config, "--set", "tune.space={train.momentum: [0.9]}", "--output", out])
    assert len(lines) == 1 and "unknown key 'train.momentum'" in lines[0]
    lines = cli_error(capsys, ["--config", config, "--tuner", "annealing"])  # argparse's own usage error
    assert "invalid choice: 'annealing'" in lines[-1]
    lines = cli_error(capsys, ["--config", str(tmp_path / "missing.yaml")])
    assert len(lines) == 1 and "does not exist" in lines[0]
    lines = cli_error(capsys, ["--config", config, "--max-trials", "0"])
    assert len(lines) == 1 and "--max-trials" in lines[0]
    lines = cli_error(capsys, ["--config", config, "--workers", "0"])
    assert len(lines) == 1 and "--workers: 0 is out of range" in lines[0]
    with pytest.MonkeyPatch.context() as patch:  # a distributed search of one's own takes --workers 1
        patch.setenv("KERASTUNER_TUNER_ID", "chief")
        lines = cli_error(capsys, ["--config", config, "--workers", "2"])
    assert len(lines) == 1 and "KERASTUNER_TUNER_ID is set; allowed: --workers 1" in lines[0]

    # A folder that is not a search is never taken over, even with --overwrite.
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    for extra in ([], ["--overwrite"], ["--workers", "2", "--overwrite"]):  # refused before a worker starts
        lines = cli_error(capsys, ["--config", config, "--output", str(tmp_path / "notes"), *extra])
        assert len(lines) == 1 and "holds no search" in lines[0]
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"

    # Resuming a search with another space is refused (a KerasTuner project would keep the old one).
    from gcl_tf import tune

    os.makedirs(out)
    saved = tune.Search(TINY, output_dir=out).description()
    with open(os.path.join(out, tune.SEARCH_FILE), "w") as handle:
        json.dump({**saved, "space": {"train.learning_rate": [1.0]}}, handle)
    lines = cli_error(capsys, ["--config", config, "--output", out])
    assert len(lines) == 1 and "different space" in lines[0] and "--overwrite" in lines[0]
    with open(os.path.join(out, tune.SEARCH_FILE), "w") as handle:
        json.dump(saved, handle)
    lines = cli_error(capsys, ["--config", config, "--output", out, "--set", "benchmark.num_tasks=3"])
    assert len(lines) == 1 and "different config (benchmark.num_tasks: 2 then, 3 now)" in lines[0]
    lines = cli_error(capsys, ["--config", config, "--output", out, "--tuner", "random"])
    assert len(lines) == 1 and "different tuner" in lines[0]


@pytest.mark.parametrize("finished", [12, 4, 1])
def test_the_report_says_how_many_of_the_finished_trials_it_lists(finished, tmp_path, capsys):
    """12 finished trials: the best 10 listed and the report says so (and where the rest are); 4:
    all, best first; 1: "1 trial finished". best.json holds every finished trial."""
    from types import SimpleNamespace

    from gcl_tf import tune
    from gcl_tf.tune.search import Search

    search = Search(TINY, output_dir=str(tmp_path))
    values = {"train.learning_rate": 0.1, "train.optimizer": "sgd"}
    trials = {f"{i:02d}": SimpleNamespace(trial_id=f"{i:02d}", status="COMPLETED", score=50.0 + i,
                                          hyperparameters=SimpleNamespace(values=values)) for i in range(finished)}
    tune.report(search, SimpleNamespace(trials=trials))
    out = capsys.readouterr().out
    listed = [line for line in out.splitlines() if line.startswith("  trial ")]
    if finished == 12:
        assert "12 trials finished; validation ACC, the best 10 of 12 (all in " in out and len(listed) == 10
    elif finished == 4:
        assert "4 trials finished; validation ACC, best first:" in out and len(listed) == 4
    else:
        assert "1 trial finished; validation ACC, best first:" in out and len(listed) == 1
    assert listed[0].startswith(f"  trial {finished - 1:02d}  {50.0 + finished - 1:6.2f}")  # the best first
    with open(tmp_path / "best.json") as handle:
        assert len(json.load(handle)["trials"]) == finished


def test_a_search_resumes_when_its_config_starts_from_other_values_of_the_searched_keys(tmp_path):
    """Every trial sets the searched keys, so their values in the config do not change the search:
    a preset that takes the search's best trial keeps the search resumable (saved searches
    recorded those values: they are dropped on both sides). Any other key is still compared."""
    from gcl_tf import tune
    from gcl_tf.errors import UserError
    from gcl_tf.tune.search import check_same_search

    out = str(tmp_path / "search")
    os.makedirs(out)
    saved = tune.Search(TINY, output_dir=out).description()
    assert "learning_rate" not in saved["config"]["train"] and "optimizer" not in saved["config"]["train"]
    saved["config"]["train"]["learning_rate"] = 0.1  # as a search saved before it dropped them
    with open(os.path.join(out, tune.SEARCH_FILE), "w") as handle:
        json.dump(saved, handle)
    best = {**TINY, "train": {**TINY["train"], "learning_rate": 0.01, "optimizer": "adam"}}
    check_same_search(tune.Search(best, output_dir=out))  # no error
    other = {**TINY, "train": {**TINY["train"], "batch_size": 20}}
    with pytest.raises(UserError, match=r"different config \(train.batch_size: 10 then, 20 now\)"):
        check_same_search(tune.Search(other, output_dir=out))


def test_a_key_added_since_a_search_began_keeps_it_resumable(tmp_path):
    """search.json and a finished trial's results.json hold the keys of their day; a key added
    since (here train.deterministic and train.checkpoint_every, removed from what was saved)
    takes its default when a resumed search compares: the search goes on and the finished trial
    is not trained again. A key that differs is still refused."""
    import copy

    from gcl_tf import config as config_lib
    from gcl_tf import tune
    from gcl_tf.errors import UserError
    from gcl_tf.tune.search import check_same_search, finished_run

    out = str(tmp_path / "search")
    os.makedirs(out)
    search = tune.Search(TINY, output_dir=out)
    saved = search.description()
    for key in ("deterministic", "checkpoint_every"):
        saved["config"]["train"].pop(key)
    with open(os.path.join(out, tune.SEARCH_FILE), "w") as handle:
        json.dump(saved, handle)
    check_same_search(search)  # no error
    saved["config"]["method"]["memory_size"] = 60
    with open(os.path.join(out, tune.SEARCH_FILE), "w") as handle:
        json.dump(saved, handle)
    with pytest.raises(UserError, match=r"different config \(method.memory_size: 60 then, 50 now\)"):
        check_same_search(search)

    trial = config_lib.resolve(copy.deepcopy(TINY))
    results = {"config": trial.to_dict(), "eval_split": "validation", "acc": 50.0}
    del results["config"]["train"]["deterministic"]
    with open(os.path.join(out, "results.json"), "w") as handle:
        json.dump(results, handle)
    assert finished_run(out, trial)["acc"] == 50.0


# ----------------------------------------------------------------------------- --workers N on one machine
def test_local_workers_command_and_threads(tmp_path, monkeypatch):
    from gcl_tf.tune import build_parser, local

    assert [local.threads_per_worker(n, cores=2) for n in (1, 2, 3)] == [2, 1, 1]
    assert local.threads_per_worker(4, cores=16) == 4
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["--config", "c.yaml", "--output", "rel/s", "--workers", "3", "--overwrite",
                                      "--set", "seed=1", "--tuner", "random", "--max-trials", "5"])
    command = local.worker_command(args, "rel/s")
    # The workers' folder and config are absolute, and the chief's own options are not theirs.
    assert command[command.index("--output") + 1] == str(tmp_path / "rel" / "s")
    assert command[command.index("--config") + 1] == str(tmp_path / "c.yaml")
    assert "--workers" not in command and "--overwrite" not in command
    assert command[-6:] == ["--tuner", "random", "--max-trials", "5", "--set", "seed=1"]


SLOW_TRIALS = {**TINY, "benchmark": {**TINY["benchmark"], "num_tasks": 10, "samples_per_task": 900}}


def _start_local_search(cwd, output, sigint_ignored=False):
    """``--workers 2`` from ``cwd`` with relative paths, as people type it; its lines go to a queue.
    ``sigint_ignored``: started as a script's background job (``... &``), which ignores SIGINT."""
    import queue
    import signal
    import threading

    command = [sys.executable, "-m", "gcl_tf.tune", "--config", "../slow.yaml", "--output", output,
               "--workers", "2"]
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    process = subprocess.Popen(command, cwd=cwd, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=ignore)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    return process, lines


def _wait_for(lines, pattern, count, timeout=240):
    import queue
    import time

    seen, end = [], time.monotonic() + timeout
    while len([line for line in seen if re.search(pattern, line)]) < count:
        try:
            seen.append(lines.get(timeout=max(0.1, end - time.monotonic())))
        except queue.Empty:
            raise AssertionError(f"no {count} lines matching {pattern!r} in {timeout}s:\n{''.join(seen)}") from None
    return seen


def _processes_on(folder) -> list[int]:
    """Processes whose command line names ``folder`` (the workers name it absolutely)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if str(folder).encode() in handle.read():
                    pids.append(int(pid))
    return pids


def _local_search_with_both_workers_busy(tmp_path, sigint_ignored=False):
    """A ``--workers 2`` search started from another folder, once both workers run a trial."""
    write_config(tmp_path, SLOW_TRIALS)
    os.rename(tmp_path / "tiny.yaml", tmp_path / "slow.yaml")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    process, lines = _start_local_search(cwd, "rel/search", sigint_ignored)
    first = _wait_for(lines, r"^\[tuner\d\] trial \d started", 2)
    return cwd, cwd / "rel" / "search", process, lines, first


@pytest.mark.slow
def test_local_workers_share_a_search_stop_on_sigterm_and_resume(tmp_path):
    import signal

    # Stopped while both workers run a trial: the chief stops them, nothing is left running.
    cwd, folder, process, lines, first = _local_search_with_both_workers_busy(tmp_path)
    process.send_signal(signal.SIGTERM)
    assert process.wait(120) == 128 + signal.SIGTERM
    assert _processes_on(folder) == []
    assert "2 worker processes on this machine" in "".join(first)
    assert {re.search(r"^\[(tuner\d)\] trial", line).group(1) for line in first
            if re.search(r"^\[tuner\d\] trial \d started", line)} == {"tuner0", "tuner1"}

    # The same command finishes the search: every grid point once, each worker ran trials.
    process, lines = _start_local_search(cwd, "rel/search")
    assert process.wait(400) == 0
    out = "".join(list(lines.queue))
    started = re.findall(r"^\[(tuner\d)\] trial (\d) started", out, re.M)
    assert {worker for worker, _ in started} == {"tuner0", "tuner1"}, out
    assert_the_whole_grid_ran_and_the_best_is_reported(folder)
    assert out.count("Best: trial") == 1 and "[chief]" not in out  # the workers' lines, once each


@pytest.mark.slow
@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["foreground", "background-job"])
def test_a_failed_local_worker_stops_the_search_with_one_line(tmp_path, sigint_ignored):
    """Also where SIGINT is ignored (a script's ``... &``): the chief was once woken by a
    simulated SIGINT, which did nothing there, and waited for the dead worker forever."""
    import signal

    _, folder, process, lines, _ = _local_search_with_both_workers_busy(tmp_path, sigint_ignored)
    workers = _processes_on(folder)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    assert process.wait(120) == 128 + signal.SIGKILL
    out = "".join(list(lines.queue))
    assert re.search(r"^worker tuner\d was killed by SIGKILL \(its messages are above\); the search stopped: "
                     r"run the same command again", out, re.M), out
    assert _processes_on(folder) == []


# ----------------------------------------------------------------------------- Bayesian search
@pytest.mark.parametrize("keys,trials,expected", [(8, 24, 8), (7, 24, 8), (1, 24, 3), (2, 6, 3), (10, 300, 30)])
def test_a_bayesian_search_leaves_most_of_its_budget_to_the_gaussian_process(keys, trials, expected):
    from gcl_tf.tune.search import default_initial_points

    assert default_initial_points(keys, trials) == expected


def test_the_gcl_search_of_issue_22_is_mostly_guided():
    """KerasTuner's default (3 random trials per key) would make the 24 trials over GCL's 8 keys all
    random; the searched keys exclude a one-value list (kernel_width: [median])."""
    from gcl_tf.tune import Search, make_oracle

    with open(os.path.join(REPO, "configs", "permuted_fashion_mnist.yaml")) as handle:
        raw = yaml.safe_load(handle)
    gcl = Search(raw, ["method.name=gcl", "benchmark.num_tasks=10"])
    assert (gcl.tuner, gcl.max_trials, len(gcl.space), gcl.initial_points) == ("bayesian", 24, 8, 8)
    assert make_oracle(gcl, seed=1).num_initial_points == 8
    assert Search(raw, ["method.name=gcl", "tune.initial_points=5"]).initial_points == 5
    assert Search(raw, ["method.name=er"]).initial_points == 3


def test_a_bayesian_search_draws_only_its_initial_points_at_random(tmp_path, monkeypatch, capsys):
    import keras_tuner as kt

    from gcl_tf import tune

    random_draws = []
    real = kt.oracles.BayesianOptimizationOracle._random_populate_space

    def spy(self):
        random_draws.append(len(self.trials))
        return real(self)

    monkeypatch.setattr(kt.oracles.BayesianOptimizationOracle, "_random_populate_space", spy)
    raw = {**TINY, "tune": {"tuner": "bayesian", "max_trials": 5, "initial_points": 2,
                            "space": {"train.learning_rate": {"min": 0.01, "max": 0.3, "log": True}}}}
    summary = tune.search(raw=raw, output_dir=str(tmp_path / "search"))
    assert summary["trials_finished"] == 5
    assert len(random_draws) == 2  # trials 3 to 5: the Gaussian process's picks
    assert "the first 2 trials at random (tune.initial_points)" in capsys.readouterr().out


# ----------------------------------------------------------------------------- issue 22's searched configs
@pytest.mark.parametrize("searches,folder", [("first", "configs"), ("20tasks", "configs-20tasks")])
def test_the_shipped_searched_configs_are_the_searches_best_trials(tmp_path, searches, folder):
    """docs/results/search/<folder>/ (what the test runs of docs/tuning.md trained) is what
    tuned_configs.py writes: each searched key holds the best trial's value, every other key the
    config's own."""
    from helpers import load_script

    searched = os.path.join(REPO, "docs", "results", "search")
    tuned = load_script("docs", "results", "search", "tuned_configs.py")
    assert tuned.main([str(tmp_path), "--searches", searches]) == 0
    shipped = sorted(glob.glob(os.path.join(searched, folder, "*.yaml")))
    assert [os.path.basename(p) for p in shipped] == sorted(os.listdir(tmp_path))
    for path in shipped:
        benchmark = os.path.basename(path)[:-len(".yaml")]
        with open(path) as handle, open(tmp_path / os.path.basename(path)) as made:
            config = yaml.safe_load(handle)
            assert config == yaml.safe_load(made), path
        for method in ("gcl", "er"):
            with open(os.path.join(searched, tuned.SEARCHES_BY_NAME[searches][benchmark].format(method=method),
                                   "best.json")) as handle:
                best = json.load(handle)["values"]
            preset = config["presets"][method]
            assert {key: preset[key.split(".")[0]][key.split(".")[1]] for key in best} == best, (path, method)
            assert "tune" not in preset
