"""A search on a tiny stream: the grid runs every trial and picks the best validation accuracy, never
reads the test split, resumes without redoing trials, and runs each trial once with a chief and two
workers."""
from __future__ import annotations

import collections
import contextlib
import io
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from tune_harness import (
    GRID,
    TINY,
    CountingTrain,
    assert_the_whole_grid_ran_and_the_best_is_reported,
    event_tags,
    grid_point,
    single_process,  # noqa: F401 - an autouse fixture
    trial_results,
    write_config,
)

from conftest import REPO


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

